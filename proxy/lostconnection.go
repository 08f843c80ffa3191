package proxy

import (
	"errors"
	"net/http"
	"syscall"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// resendOnLostConnection sends a read again, once, when the connection it
// went out on was lost before an answer came. The transports keep
// connections to kube-apiserver open; one that kube-apiserver (or a load
// balancer in front of it) closed is found lost only when a request is
// written on it. Sent again, the read goes out on a new connection: it
// succeeds when kube-apiserver is back, and answers 503, which clients
// retry, when it cannot be reached; without it the caller got a 502 for
// an outage. Writes are never sent again: one that was lost may have been
// carried out, and only its caller can know whether to retry it.
type resendOnLostConnection struct{ next http.RoundTripper }

func (t resendOnLostConnection) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil || !resendable(r) || r.Context().Err() != nil || !lostConnection(err) {
		return resp, err
	}
	return t.next.RoundTrip(r)
}

// resendable: a read without a body, which sending again changes nothing.
func resendable(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.Body == nil || r.Body == http.NoBody)
}

// lostConnection reports whether err says the connection closed under the
// request rather than that kube-apiserver answered or could not be reached.
func lostConnection(err error) bool {
	// A write on a connection the peer has closed fails with EPIPE
	// ("broken pipe") rather than a reset when the close came first.
	return utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		errors.Is(err, syscall.EPIPE)
}
