package proxy

import (
	"net/http"

	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/internal/stackgrow"
)

// Every request is served on a fresh goroutine with Go's small initial
// stack. A write outgrows it on its way through authentication, and an
// intercepted write grows it again, a doubling at a time, deep inside the
// interceptor: each growth copies the stack, frames and all, which cost a
// write as much CPU as its decision. Growing once, while the stack is
// shallow, copies little. Reads and watches keep the small stack: a watch
// lives long and most of them are shallow.

// The growths, replaceable by tests.
var (
	growWriteStack       = stackgrow.To8K
	growInterceptedStack = stackgrow.To32K
)

// withWriteStack gives a write the stack that authentication and a
// pass-through forward need. It is small on purpose: the write has not
// been authenticated yet.
func withWriteStack(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			growWriteStack()
		}
		next.ServeHTTP(w, r)
	})
}

// withGrownWriteStack gives an authenticated write the stack the write
// path needs. It sits behind the mutating in-flight limit, so at most that
// many such stacks exist at once.
func withGrownWriteStack(next http.Handler, longRunning request.LongRunningRequestCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info, ok := request.RequestInfoFrom(r.Context()); ok && !readOnlyVerbs.Has(info.Verb) && !longRunning(r, info) {
			growInterceptedStack()
		}
		next.ServeHTTP(w, r)
	})
}
