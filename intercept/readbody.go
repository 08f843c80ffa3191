// Reading an intercepted write's body: bounded in size and in time, and
// replayable for forwarding.

package intercept

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// readBody reads at most limit bytes, within the request's deadline: a
// body trickled in a byte at a time must not hold a write (and its memory)
// for longer than any other request may take. When the body is larger than
// limit, the bytes read so far are put back in front of the rest, so the
// request can still be forwarded untouched.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (data []byte, tooLarge bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		restoreBody(r, nil)
		return nil, false, nil
	}
	if deadline, ok := r.Context().Deadline(); ok {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(deadline) == nil {
			// The connection may serve further requests.
			defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
		}
	}
	orig := r.Body
	data, err = io.ReadAll(io.LimitReader(orig, limit+1))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || r.Context().Err() != nil {
			return nil, false, bodyTimeout()
		}
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
	}
	if int64(len(data)) > limit {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), orig), orig}
		return data, true, nil
	}
	_ = orig.Close()
	restoreBody(r, data)
	return data, false, nil
}

func bodyTimeout() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusGatewayTimeout,
		Reason:  metav1.StatusReasonTimeout,
		Message: "the request body did not arrive within the proxy's --request-timeout (or the request's shorter ?timeout=); nothing was written",
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
	}}
}

func restoreBody(r *http.Request, data []byte) {
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	r.Header.Set("Content-Length", strconv.Itoa(len(data)))
}

// deleteDryRun reports whether the body of a delete or an eviction asks for
// a dry run: kube-apiserver takes a delete's options from its body when it
// has one (kubectl drain --dry-run=server sends them in the Eviction).
func deleteDryRun(r *http.Request, wr *write, data []byte) (bool, error) {
	if len(data) == 0 {
		return false, nil
	}
	switch {
	case wr.sub == evictionSubresource:
		var eviction struct {
			DeleteOptions *metav1.DeleteOptions `json:"deleteOptions"`
		}
		// An eviction that is not JSON is decoded by kube-apiserver, which
		// answers for it; its dryRun cannot be read here.
		if json.Unmarshal(data, &eviction) != nil || eviction.DeleteOptions == nil {
			return false, nil
		}
		return slices.Contains(eviction.DeleteOptions.DryRun, metav1.DryRunAll), nil
	case r.Method == http.MethodDelete:
		opts, err := deleteOptionsOf(r, data)
		if err != nil {
			return false, err
		}
		return slices.Contains(opts.DryRun, metav1.DryRunAll), nil
	}
	return false, nil
}

// readInterceptedBody reads the body of a write the proxy decides: the
// whole of it, or a 413 when it is larger than --max-request-body-bytes.
func (i *Interceptor) readInterceptedBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, tooLarge, err := readBody(w, r, i.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	if tooLarge {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the body of this intercepted write exceeds the proxy's limit of %d bytes (--max-request-body-bytes)", i.cfg.MaxBodyBytes))
	}
	return data, nil
}

// readShadowBody reads the body of a shadow controller's write. A body that
// cannot be read whole is not decided: the request goes upstream as it came
// (shadow changes nothing), the failure is logged, and ok is false.
func (i *Interceptor) readShadowBody(w http.ResponseWriter, r *http.Request, p *pending, forward http.Handler) (data []byte, ok bool) {
	data, tooLarge, err := readBody(w, r, i.cfg.MaxBodyBytes)
	if err == nil && !tooLarge {
		return data, true
	}
	if err == nil {
		err = fmt.Errorf("body larger than %d bytes: not decided", i.cfg.MaxBodyBytes)
	}
	i.logError(r, p, err)
	forward.ServeHTTP(w, r)
	return nil, false
}
