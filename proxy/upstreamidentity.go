package proxy

import (
	"context"
	"net/http"
	"net/http/httputil"

	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/authn"
)

type proxyCredentialsKey struct{}

// rewrite runs after ReverseProxy removed hop-by-hop headers, so identity
// headers set here cannot be dropped by a caller's Connection header.
func (up *upstream) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(up.url)
	pr.Out.Host = up.url.Host
	caller, _ := callerFrom(pr.In.Context())
	effective, _ := request.UserFrom(pr.In.Context())
	authn.SanitizeInbound(pr.Out.Header)
	useProxy := authn.ApplyUpstreamIdentity(pr.Out.Header, caller, effective)
	pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), proxyCredentialsKey{}, useProxy))
}

// credentialSwitch picks the transport whose credentials rewrite chose.
// Without an explicit choice it uses the caller transport, which carries no
// credentials at all: failing closed.
type credentialSwitch struct{ proxy, caller http.RoundTripper }

func (c credentialSwitch) RoundTrip(r *http.Request) (*http.Response, error) {
	if useProxy, _ := r.Context().Value(proxyCredentialsKey{}).(bool); useProxy {
		return c.proxy.RoundTrip(r)
	}
	return c.caller.RoundTrip(r)
}
