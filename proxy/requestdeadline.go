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
	"sync"
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
// does not end a read that is waiting on the network, so when the deadline
// passes such a read is ended by a read deadline on the connection (on
// HTTP/2, on the stream): a caller that trickles its body holds a write no
// longer than any other request may take. When the body is cut off and nothing answered the caller, the
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
		served := endBodyReadsWith(ctx, w)
		rec := httpx.NewCodeRecorder(w)
		next.ServeHTTP(rec, r)
		served()
		if rec.Code() == 0 && body.cutOff.Load() {
			// Whoever read the body saw the connection's context end with
			// it and answered nobody.
			WriteStatus(rec, bodyTimeout())
		}
	})
}

// aLongTimeAgo is a read deadline that has passed: it ends a read under
// way at once.
var aLongTimeAgo = time.Unix(1, 0)

// endBodyReadsWith ends a read of the request body that is still waiting
// on the network when ctx's deadline passes, by giving the connection (on
// HTTP/2, the stream) a read deadline that has passed. The deadline's own
// timer does it: a read deadline set up front would cost every write on
// HTTP/2 a round trip to the connection's goroutine and a timer there,
// for the rare body that comes too slowly. Call the function it returns
// once the handler is done: the connection's next request must not get
// the deadline.
func endBodyReadsWith(ctx context.Context, w http.ResponseWriter) (served func()) {
	var mu sync.Mutex
	done := false
	stop := context.AfterFunc(ctx, func() {
		if ctx.Err() != context.DeadlineExceeded {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !done {
			// An error means the connection cannot take a deadline (a
			// test's recorder); the context still ends everything but a
			// blocked read.
			_ = http.NewResponseController(w).SetReadDeadline(aLongTimeAgo)
		}
	})
	return func() {
		if stop() {
			return
		}
		mu.Lock()
		done = true
		mu.Unlock()
	}
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
