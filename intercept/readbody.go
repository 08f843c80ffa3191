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
