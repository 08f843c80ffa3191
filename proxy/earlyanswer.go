package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kausality-io/kausality-proxy/internal/httpx"
)

// withEarlyAnswerClose makes an answer that is sent before the request body
// has been read to its end (a 401, a 403, a 413, a 429, a timeout, an
// upstream that answered early) reach the caller at once and end the
// connection, as kube-apiserver does with its "Connection: close".
//
// Left alone, Go's HTTP/1.1 server reads up to 256 KiB of the unread body
// before it writes the answer's header, and again after the handler
// returns, so that the connection can be reused. A client that trickles its
// body a byte at a time then holds the connection, and the goroutine
// serving it, for as long as it likes, without ever having authenticated.
// "Connection: close" skips the first read; a read deadline in the past
// ends the second at once. HTTP/2 needs neither: its server resets the
// stream of an answered request whose body is still coming.
func withEarlyAnswerClose(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body := &bodyProgress{src: r.Body}
		r = r.WithContext(r.Context())
		r.Body = body
		rec := httpx.NewCodeRecorder(w)
		rec.BeforeHeader = func(int) {
			if body.ended() {
				return
			}
			if r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close")
			}
			// Wakes a read of the body that is waiting on the network
			// (the reverse proxy's transport may still be in one).
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
		next.ServeHTTP(rec, r)
		if body.ended() {
			return
		}
		if rec.Code() == 0 {
			// The server writes an empty answer itself; it must not wait
			// for the body either.
			w.Header().Set("Connection", "close")
		}
		// A read still under way when the handler returns makes the server
		// clear the read deadline, and its own read of the rest of the body
		// would then wait for the client. So no read is left under way:
		// later ones fail without touching the connection, and the one in
		// flight, if any, ends at the deadline.
		body.abandon()
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		body.wait()
	})
}

// errBodyAbandoned is what a read of a request body gets once its request
// has been answered.
var errBodyAbandoned = errors.New("the request was answered before its body arrived")

// bodyProgress is the request body as the handlers see it. It tells
// whether the body has been read to its end: a read that failed (a
// deadline, a broken chunk) leaves bytes on the wire that must not be read
// as the next request, so it does not count. Reads are serialized, so that
// abandon and wait can know that none is under way; the reverse proxy reads
// the body on its transport's goroutine. Close does not close the
// underlying body: the server does, after the handler (net/http reads the
// rest of the body on Close, which must not happen on a goroutine nobody
// waits for).
type bodyProgress struct {
	mu        sync.Mutex
	src       io.ReadCloser
	end       atomic.Bool
	abandoned atomic.Bool
}

func (b *bodyProgress) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.abandoned.Load() {
		return 0, errBodyAbandoned
	}
	n, err := b.src.Read(p)
	if err == io.EOF {
		b.end.Store(true)
	}
	return n, err
}

func (b *bodyProgress) Close() error { return nil }

func (b *bodyProgress) ended() bool { return b.end.Load() }

// abandon makes later reads fail; a read under way goes on.
func (b *bodyProgress) abandon() { b.abandoned.Store(true) }

// wait returns once no read is under way.
func (b *bodyProgress) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
}
