// Reading an intercepted write's body: bounded in size and in time, and
// replayable for forwarding.

package intercept

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/body"
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

// restoreBody makes data the body of r. The body is then in hand, so an
// "Expect: 100-continue" of the caller's is dropped: passed upstream it
// makes kube-apiserver answer "100 Continue" first, which the reverse proxy
// relays as the first status of every answer the proxy reads or relays for
// this write (a dry run taken for refused, a real answer for its interim
// status).
func restoreBody(r *http.Request, data []byte) {
	r.Header.Del("Expect")
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	r.Header.Set("Content-Length", strconv.Itoa(len(data)))
}

// evictionGVK is the kind of an eviction's body when it names none.
var evictionGVK = schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}

// deleteDryRun reports whether the options of a delete or an eviction make
// it a dry run. kube-apiserver takes a DELETE's options from its body when
// it has one, and from the query only when it has none; an eviction's come
// from its body (kubectl drain --dry-run=server sends them there) as well
// as from the query. As in classify, any dryRun value counts: a value other
// than "All" is refused by kube-apiserver, so the write changes nothing.
func deleteDryRun(r *http.Request, wr *write, data []byte) (bool, error) {
	switch {
	case r.Method == http.MethodDelete && wr.sub == mainResource:
		opts, err := deleteOptionsOf(r, data)
		if err != nil {
			return false, err
		}
		return len(opts.DryRun) > 0, nil
	case len(data) == 0:
		return false, nil
	case wr.sub == evictionSubresource:
		// Decoded as any other body, whatever its format: a dryRun the
		// proxy cannot read would make a dry run consume a once approval.
		eviction, _, err := body.DecodeOfKind(r.Header.Get("Content-Type"), data, evictionGVK)
		if err != nil {
			return false, err
		}
		dryRun, _, err := unstructured.NestedFieldNoCopy(eviction.Object, "deleteOptions", "dryRun")
		if err != nil {
			return false, apierrors.NewBadRequest(fmt.Sprintf("the Eviction's deleteOptions: %v", err))
		}
		values, ok := dryRun.([]any)
		if dryRun != nil && !ok {
			return false, apierrors.NewBadRequest(fmt.Sprintf("the Eviction's deleteOptions.dryRun must be a list of strings, got %s", body.Describe(dryRun)))
		}
		return len(values) > 0, nil
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

// readShadowBody reads the body of a shadow controller's write; an error
// when it cannot be read whole.
func (i *Interceptor) readShadowBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, tooLarge, err := readBody(w, r, i.cfg.MaxBodyBytes)
	if err == nil && tooLarge {
		err = fmt.Errorf("body larger than %d bytes: not decided", i.cfg.MaxBodyBytes)
	}
	return data, err
}
