// The one port through which the write path reaches kube-apiserver as the
// caller: the write itself, and server-side dry runs of it. Only the
// orchestration (serve.go) holds it; the proxy's own reads and writes go
// through the object store and the writer client instead.

package intercept

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upstream sends requests to kube-apiserver as the caller.
type upstream interface {
	// send forwards r and writes kube-apiserver's answer to w.
	send(w http.ResponseWriter, r *http.Request)
	// dryRun sends r with body data as a server-side dry run and holds
	// kube-apiserver's answer, at most limit bytes of it.
	dryRun(r *http.Request, data []byte, limit int) (*bufferedResponse, error)
}

// forwarder is the upstream of the proxy's handler chain.
type forwarder struct{ next http.Handler }

func (f forwarder) send(w http.ResponseWriter, r *http.Request) { f.next.ServeHTTP(w, r) }

func (f forwarder) dryRun(r *http.Request, data []byte, limit int) (*bufferedResponse, error) {
	dry, err := dryRunOf(r, data)
	if err != nil {
		return nil, err
	}
	answer := newBufferedResponse(limit)
	f.next.ServeHTTP(answer, dry)
	return answer, nil
}

// dryRunOf is req as a server-side dry run, with body data. The dryRun
// goes where kube-apiserver reads it: a DELETE with a body takes its
// options from the body alone (a dryRun in the query next to a body is
// ignored, and the "dry run" would delete).
func dryRunOf(req *http.Request, data []byte) (*http.Request, error) {
	dry := req.Clone(req.Context())
	dry.RequestURI = ""
	if req.Method == http.MethodDelete && len(data) > 0 {
		opts, err := deleteOptionsOf(req, data)
		if err != nil {
			return nil, err
		}
		opts.DryRun = []string{metav1.DryRunAll}
		opts.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "DeleteOptions"}
		if data, err = json.Marshal(opts); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		dry.Header.Set("Content-Type", "application/json")
	} else {
		q := dry.URL.Query()
		q.Set("dryRun", metav1.DryRunAll)
		dry.URL.RawQuery = q.Encode()
	}
	restoreBody(dry, data)
	return dry, nil
}

// conflictCatcher passes an answer through to the client, except a 409
// when hold is set: that one is kept from the client (headers included),
// so that the write can be decided again.
type conflictCatcher struct {
	w      http.ResponseWriter
	hold   bool
	header http.Header
	code   int
	held   bool
}

func newConflictCatcher(w http.ResponseWriter, hold bool) *conflictCatcher {
	return &conflictCatcher{w: w, hold: hold, header: http.Header{}}
}

func (c *conflictCatcher) Header() http.Header {
	if c.code != 0 && !c.held {
		return c.w.Header()
	}
	return c.header
}

func (c *conflictCatcher) WriteHeader(code int) {
	if c.code != 0 || code >= 100 && code < 200 {
		if !c.held {
			c.w.WriteHeader(code)
		}
		return
	}
	c.code = code
	if c.hold && code == http.StatusConflict {
		c.held = true
		return
	}
	for k, vs := range c.header {
		c.w.Header()[k] = vs
	}
	c.w.WriteHeader(code)
}

func (c *conflictCatcher) Write(p []byte) (int, error) {
	if c.code == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.held {
		return len(p), nil
	}
	return c.w.Write(p)
}

func (c *conflictCatcher) Flush() {
	if !c.held && c.code != 0 {
		_ = http.NewResponseController(c.w).Flush()
	}
}

func (c *conflictCatcher) Unwrap() http.ResponseWriter { return c.w }

// bufferedResponse holds an answer that may or may not be relayed.
type bufferedResponse struct {
	header    http.Header
	code      int
	body      bytes.Buffer
	limit     int
	truncated bool
}

func newBufferedResponse(limit int) *bufferedResponse {
	return &bufferedResponse{header: http.Header{}, limit: limit}
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	// An informational 1xx is not the answer; the final status follows.
	if b.code == 0 && (code < 100 || code >= 200) {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	if room := b.limit - b.body.Len(); room < len(p) {
		b.truncated = true
		b.body.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.body.Write(p)
}

// succeeded reports a 2xx answer.
func (b *bufferedResponse) succeeded() bool { return b.code >= 200 && b.code < 300 }

// replay writes the held answer to w, or a Status saying what happened when
// it was too large to hold.
func (b *bufferedResponse) replay(w http.ResponseWriter, writeError ErrorWriter) {
	if b.truncated || b.code == 0 {
		code := int32(http.StatusBadGateway)
		if b.code >= 400 && b.code <= 599 {
			code = int32(b.code)
		}
		writeError(w, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code,
			Message: fmt.Sprintf("kube-apiserver refused a dry run of this write with %d, and its answer was too large to relay; nothing was written", b.code)}})
		return
	}
	for k, vs := range b.header {
		if strings.EqualFold(k, "Content-Length") {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(b.code)
	_, _ = w.Write(b.body.Bytes())
}

// refusedByServer is a dry run kube-apiserver refused: the write itself
// would be refused the same way, and its answer is relayed.
type refusedByServer struct{ answer *bufferedResponse }

func (e *refusedByServer) Error() string {
	return fmt.Sprintf("kube-apiserver refused a dry run of this write with %d", e.answer.code)
}
