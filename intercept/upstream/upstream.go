// Package upstream is the one port through which the write path reaches
// kube-apiserver as the caller: the write itself, and server-side dry runs
// of it, with the answers held, relayed or kept from the client. The
// proxy's own reads and writes go through the object store and the writer
// client instead.
package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/body"
)

// Port sends requests to kube-apiserver as the caller.
type Port interface {
	// Send forwards r and writes kube-apiserver's answer to w.
	Send(w http.ResponseWriter, r *http.Request)
	// DryRun sends r with body data as a server-side dry run and holds
	// kube-apiserver's answer, at most limit bytes of it.
	DryRun(r *http.Request, data []byte, limit int) (*Answer, error)
}

// Forwarder is the Port of the proxy's handler chain: Next forwards.
type Forwarder struct{ Next http.Handler }

// Send implements Port.
func (f Forwarder) Send(w http.ResponseWriter, r *http.Request) { f.Next.ServeHTTP(w, r) }

// DryRun implements Port.
func (f Forwarder) DryRun(r *http.Request, data []byte, limit int) (*Answer, error) {
	dry, err := DryRunOf(r, data)
	if err != nil {
		return nil, err
	}
	answer := newAnswer(limit)
	f.Next.ServeHTTP(answer, dry)
	return answer, nil
}

// DryRunOf is req as a server-side dry run, with body data. The dryRun
// goes where kube-apiserver reads it: a DELETE with a body takes its
// options from the body alone (a dryRun in the query next to a body is
// ignored, and the "dry run" would delete).
func DryRunOf(req *http.Request, data []byte) (*http.Request, error) {
	dry := req.Clone(req.Context())
	dry.RequestURI = ""
	if req.Method == http.MethodDelete && len(data) > 0 {
		opts, err := DeleteOptionsOf(req, data)
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
	RestoreBody(dry, data)
	return dry, nil
}

// ConflictCatcher passes an answer through to the client, except a 409
// for a resourceVersion precondition when hold is set: that one is kept
// from the client (headers included), so that the write can be decided
// again. Any other 409 (a uid precondition, an admission webhook's, a
// server-side apply field conflict) answers the caller's write, which no
// retry changes: Done relays it.
type ConflictCatcher struct {
	w    http.ResponseWriter
	hold bool
	// uid: the uid precondition whose failure is held, in place of the
	// resourceVersion precondition's ("" for that one).
	uid    string
	header http.Header
	code   int
	held   bool
	body   bytes.Buffer
}

// maxHeldConflict bounds the 409 held; kube-apiserver's are small Status
// objects, and a larger one is no precondition failure of its.
const maxHeldConflict = 64 << 10

// optimisticLockMessage is how kube-apiserver's storage words a write
// whose resourceVersion precondition failed (OptimisticLockErrorMsg of
// k8s.io/apiserver's generic registry), without its spaces: it is the
// same bytes in a JSON, CBOR or protobuf Status, and a YAML one folds it
// over lines.
var optimisticLockMessage = withoutSpace([]byte("the object has been modified; please apply your changes to the latest version and try again"))

// withoutSpace is b without its ASCII white space.
func withoutSpace(b []byte) []byte {
	return bytes.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\n', '\r':
			return -1
		}
		return r
	}, b)
}

// NewConflictCatcher passes answers to w, holding a 409 when hold is set.
func NewConflictCatcher(w http.ResponseWriter, hold bool) *ConflictCatcher {
	return &ConflictCatcher{w: w, hold: hold, header: http.Header{}}
}

// NewUIDConflictCatcher passes answers to w, holding a 409 for the failure
// of a delete's precondition on uid.
func NewUIDConflictCatcher(w http.ResponseWriter, uid types.UID) *ConflictCatcher {
	return &ConflictCatcher{w: w, hold: true, uid: string(uid), header: http.Header{}}
}

// Header implements http.ResponseWriter.
func (c *ConflictCatcher) Header() http.Header {
	if c.code != 0 && !c.held {
		return c.w.Header()
	}
	return c.header
}

// WriteHeader implements http.ResponseWriter.
func (c *ConflictCatcher) WriteHeader(code int) {
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
	c.pass()
}

// pass sends the answer's status and headers on to the client.
func (c *ConflictCatcher) pass() {
	for k, vs := range c.header {
		c.w.Header()[k] = vs
	}
	c.w.WriteHeader(c.code)
}

// Write implements http.ResponseWriter.
func (c *ConflictCatcher) Write(p []byte) (int, error) {
	if c.code == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.held {
		return c.w.Write(p)
	}
	if c.body.Len()+len(p) <= maxHeldConflict {
		return c.body.Write(p)
	}
	// Too large for a precondition failure: it goes to the client.
	if err := c.release(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// release relays the held 409 to the client.
func (c *ConflictCatcher) release() error {
	c.held = false
	c.header.Del("Content-Length")
	c.pass()
	_, err := c.w.Write(c.body.Bytes())
	c.body.Reset()
	return err
}

// Flush implements http.Flusher.
func (c *ConflictCatcher) Flush() {
	if !c.held && c.code != 0 {
		_ = http.NewResponseController(c.w).Flush()
	}
}

// Unwrap lets http.ResponseController reach the client's writer.
func (c *ConflictCatcher) Unwrap() http.ResponseWriter { return c.w }

// Done ends the answer, once kube-apiserver's has been read whole. It
// reports whether a 409 for the precondition is held; a held 409 of any
// other cause is relayed to the client now.
func (c *ConflictCatcher) Done() bool {
	if c.held && !c.preconditionFailed(withoutSpace(c.body.Bytes())) {
		_ = c.release()
	}
	return c.held
}

// preconditionFailed reports whether body, without its white space, is
// kube-apiserver's word for the failure of the precondition held. A
// failed uid precondition is worded by its storage (storage.Preconditions)
// or by graceful deletion (rest.BeforeDelete), each naming the uid.
func (c *ConflictCatcher) preconditionFailed(body []byte) bool {
	if c.uid == "" {
		return bytes.Contains(body, optimisticLockMessage)
	}
	return uidPreconditionFailed(body, c.uid)
}

// uidPreconditionFailed reports whether body, without its white space, is
// kube-apiserver's word for the failure of a precondition on uid.
func uidPreconditionFailed(body []byte, uid string) bool {
	return bytes.Contains(body, withoutSpace([]byte("UID in precondition: "+uid+", UID in object meta:"))) ||
		bytes.Contains(body, withoutSpace([]byte("the UID in the precondition ("+uid+") does not match the UID in record")))
}

// PreconditionFailed reports whether the answer is kube-apiserver's 409
// for the failure of the precondition the proxy added: a delete's on uid
// (uid not ""), else a write's on its resourceVersion.
func (b *Answer) PreconditionFailed(uid types.UID) bool {
	if b.code != http.StatusConflict || b.truncated {
		return false
	}
	body := withoutSpace(b.body.Bytes())
	if uid == "" {
		return bytes.Contains(body, optimisticLockMessage)
	}
	return uidPreconditionFailed(body, string(uid))
}

// Answer holds an answer of kube-apiserver's that may or may not be
// relayed.
type Answer struct {
	header    http.Header
	code      int
	body      bytes.Buffer
	limit     int
	truncated bool
}

func newAnswer(limit int) *Answer {
	return &Answer{header: http.Header{}, limit: limit}
}

// Header implements http.ResponseWriter.
func (b *Answer) Header() http.Header { return b.header }

// WriteHeader implements http.ResponseWriter.
func (b *Answer) WriteHeader(code int) {
	// An informational 1xx is not the answer; the final status follows.
	if b.code == 0 && (code < 100 || code >= 200) {
		b.code = code
	}
}

// Write implements http.ResponseWriter.
func (b *Answer) Write(p []byte) (int, error) {
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

// Succeeded reports a 2xx answer.
func (b *Answer) Succeeded() bool { return b.code >= 200 && b.code < 300 }

// Code is the answer's status code.
func (b *Answer) Code() int { return b.code }

// Body is the answer's body, as far as it was held.
func (b *Answer) Body() []byte { return b.body.Bytes() }

// Truncated reports whether the answer was longer than it could hold.
func (b *Answer) Truncated() bool { return b.truncated }

// Replay writes the held answer to w, or through writeError a Status
// saying what happened when it was too large to hold.
func (b *Answer) Replay(w http.ResponseWriter, writeError func(http.ResponseWriter, error)) {
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

// RefusedError is a dry run kube-apiserver refused: the write itself
// would be refused the same way, and its Answer is relayed.
type RefusedError struct{ Answer *Answer }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("kube-apiserver refused a dry run of this write with %d", e.Answer.code)
}

// DeleteOptionsOf are the DeleteOptions of a delete or deletecollection,
// decoded as kube-apiserver decodes them: from the body when there is one,
// else from the query.
func DeleteOptionsOf(r *http.Request, data []byte) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	if len(data) == 0 {
		if err := scheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return opts, nil
	}
	mediaType := "application/json"
	if ct := r.Header.Get("Content-Type"); ct != "" {
		var err error
		if mediaType, _, err = mime.ParseMediaType(ct); err != nil {
			return nil, unsupportedDeleteOptions(ct)
		}
	}
	if mediaType == runtime.ContentTypeCBOR {
		// kube-apiserver's DeleteOptions codecs have no CBOR; the proxy's
		// own decoder reads it, as for any other body.
		obj, _, err := body.DecodeOfKind(mediaType, data, schema.GroupVersionKind{Version: "v1", Kind: "DeleteOptions"})
		if err != nil {
			return nil, err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, opts); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the CBOR body is not DeleteOptions: %v", err))
		}
		return opts, nil
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		return nil, unsupportedDeleteOptions(mediaType)
	}
	defaultGVK := metav1.SchemeGroupVersion.WithKind("DeleteOptions")
	obj, _, err := scheme.Codecs.DecoderToVersion(info.Serializer, metav1.SchemeGroupVersion).Decode(data, &defaultGVK, opts)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if obj != opts {
		return nil, apierrors.NewBadRequest("decoded object cannot be converted to DeleteOptions")
	}
	return opts, nil
}

func unsupportedDeleteOptions(mediaType string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of a DELETE must be DeleteOptions in JSON, YAML, protobuf or CBOR; got Content-Type %q", mediaType),
	}}
}

// RestoreBody makes data the body of r. The body is then in hand, so an
// "Expect: 100-continue" of the caller's is dropped: passed upstream it
// makes kube-apiserver answer "100 Continue" first, which the reverse proxy
// relays as the first status of every answer the proxy reads or relays for
// this write (a dry run taken for refused, a real answer for its interim
// status).
func RestoreBody(r *http.Request, data []byte) {
	r.Header.Del("Expect")
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	r.Header.Set("Content-Length", strconv.Itoa(len(data)))
}
