// Package intercept decides about writes. The proxy hands every request to
// Interceptor.Wrap; reads and non-targeted writes go straight to the
// forwarder, intercepted writes are decoded, judged and then forwarded
// (possibly mutated) or rejected.
package intercept

import "net/http"

// ErrorWriter writes an error as a metav1.Status. The proxy owns the wire
// format; intercept only decides which error to send.
type ErrorWriter func(w http.ResponseWriter, err error)

// Interceptor holds what write interception needs across requests.
type Interceptor struct{}

// New returns an Interceptor.
func New() *Interceptor { return &Interceptor{} }

// Wrap returns the handler the proxy chain calls in place of forward.
func (i *Interceptor) Wrap(forward http.Handler, writeError ErrorWriter) http.Handler {
	return forward
}
