package proxy

import (
	"io"
	"net/http"
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
		body := &bodyProgress{ReadCloser: r.Body}
		r = r.WithContext(r.Context())
		r.Body = body
		endBodyEarly := func() {
			if body.ended() {
				return
			}
			if r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close")
			}
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
		rec := httpx.NewCodeRecorder(w)
		rec.BeforeHeader = func(int) { endBodyEarly() }
		next.ServeHTTP(rec, r)
		if rec.Code() == 0 {
			// The server writes an empty answer itself; it must not wait
			// for the body either.
			endBodyEarly()
		}
	})
}

// bodyProgress tells whether a request body has been read to its end. A
// read that failed (a deadline, a broken chunk) leaves bytes on the wire
// that must not be read as the next request, so it does not count. The
// reverse proxy reads the body on its transport's goroutine, so the flag is
// atomic.
type bodyProgress struct {
	io.ReadCloser
	end atomic.Bool
}

func (b *bodyProgress) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.end.Store(true)
	}
	return n, err
}

func (b *bodyProgress) ended() bool { return b.end.Load() }
