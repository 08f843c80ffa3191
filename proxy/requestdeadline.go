package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/internal/httpx"
)

// withRequestDeadline bounds requests that are not long-running. A shorter
// ?timeout= from the client wins, as it does in kube-apiserver.
// Long-running requests have no deadline, but they end when the server
// starts shutting down (draining is done): a watch never becomes idle, and
// its client simply re-establishes it against another replica.
//
// The bound covers the request body too. A deadline on the context alone
// does not end a read that is waiting on the network, so the body gets a
// read deadline on the connection (on HTTP/2, on the stream): a caller that
// trickles its body holds a write no longer than any other request may
// take. When the body is cut off and nothing answered the caller, the
// answer is a 504 Status, as kube-apiserver's timeout filter gives.
//
//nolint:revive // draining is the server's lifetime, not a request context; filters take the next handler first
func withRequestDeadline(next http.Handler, longRunning request.LongRunningRequestCheck, limit time.Duration, draining context.Context, clk clock.PassiveClock) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := request.RequestInfoFrom(r.Context())
		if !ok || longRunning(r, info) {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			stop := context.AfterFunc(draining, cancel)
			defer stop()
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		timeout := limit
		if v := timeoutParameter(r.URL.RawQuery); v != "" {
			if d, err := time.ParseDuration(v); err == nil && d > 0 && d < timeout {
				// leave the upstream room to answer its own timeout first
				timeout = d + time.Second
			}
		}
		deadline := clk.Now().Add(timeout)
		ctx, cancel := context.WithDeadline(r.Context(), deadline)
		defer cancel()
		r = r.WithContext(ctx)
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body := &deadlineBody{ReadCloser: r.Body}
		r.Body = body
		// An error means the connection cannot take a deadline (a test's
		// recorder); the context deadline still bounds everything but a
		// blocked read.
		_ = http.NewResponseController(w).SetReadDeadline(deadline)
		// The metrics filter outside already records the code; a recorder
		// of its own only where there is none (a test's writer).
		rec, recorded := w.(*httpx.CodeRecorder)
		if !recorded || rec.Code() != 0 {
			rec = httpx.NewCodeRecorder(w)
		}
		next.ServeHTTP(rec, r)
		if rec.Code() == 0 && body.cutOff.Load() {
			// Whoever read the body saw the connection's context end with
			// it and answered nobody.
			WriteStatus(rec, bodyTimeout())
		}
	})
}

// timeoutParameter is the request's ?timeout=, read without parsing a
// query that cannot hold it: most writes carry other parameters (a
// fieldManager, a dryRun), and parsing them costs every write a map. A
// query with a percent sign may spell the name escaped, and is parsed.
func timeoutParameter(rawQuery string) string {
	if !strings.Contains(rawQuery, "timeout") && !strings.Contains(rawQuery, "%") {
		return ""
	}
	q, _ := url.ParseQuery(rawQuery)
	return q.Get("timeout")
}

// errBodyDeadline marks a body read that ran into the request's read
// deadline: the transport that forwards the body returns it, and the
// caller then learns that its body was too slow, not that the upstream
// failed.
var errBodyDeadline = errors.New("the request body did not arrive before the request's deadline")

// deadlineBody notes that a read ran into the read deadline.
type deadlineBody struct {
	io.ReadCloser
	cutOff atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		b.cutOff.Store(true)
		err = fmt.Errorf("%w: %w", errBodyDeadline, err)
	}
	return n, err
}

func bodyTimeout() *apierrors.StatusError {
	err := statusError(http.StatusGatewayTimeout, metav1.StatusReasonTimeout,
		"the request body did not arrive within the proxy's --request-timeout (or the request's shorter ?timeout=), so the request was cut off before kube-apiserver could act on it; send the body at once")
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return err
}
