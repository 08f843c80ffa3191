package proxy

import (
	"net/http"

	"github.com/kausality-io/kausality-proxy/internal/stackgrow"
)

// growWriteStack is replaceable by tests.
var growWriteStack = stackgrow.To8K

// withWriteStack grows a write's stack to what authentication and a
// pass-through forward need, while it is shallow. Every request is served
// on a fresh goroutine with Go's small initial stack; a write outgrows it
// in authentication, and a growth that deep copies many frames. Reads and
// watches keep the small stack: a watch lives long, and most are shallow.
// The growth is small on purpose: the write is not authenticated yet.
// (An intercepted write grows its stack again, once, when the interceptor
// takes it.)
func withWriteStack(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			growWriteStack()
		}
		next.ServeHTTP(w, r)
	})
}
