package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/authn"
)

// recordingTransport stands in for one of the two upstream transports and
// keeps the request it was asked to send.
type recordingTransport struct {
	name string
	sent *[]sentRequest
}

type sentRequest struct {
	transport string
	req       *http.Request
}

func (t recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	*t.sent = append(*t.sent, sentRequest{transport: t.name, req: r})
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
}

func TestUpstreamIdentity(t *testing.T) {
	alice := &authn.Caller{Method: authn.MethodX509, User: &user.DefaultInfo{Name: "alice", Groups: []string{"devs", user.AllAuthenticated}}}
	tokenAlice := &authn.Caller{Method: authn.MethodToken, Token: "alice-token", User: alice.User}
	anonymous := &authn.Caller{Method: authn.MethodAnonymous, User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}
	jane := &user.DefaultInfo{Name: "jane", Groups: []string{user.AllAuthenticated}}
	aliceImpersonated := map[string][]string{"Impersonate-User": {"alice"}, "Impersonate-Group": {"devs"}}
	aliceToken := map[string][]string{"Authorization": {"Bearer alice-token"}}
	spoofs := map[string]string{
		"Impersonate-User": "root", "Impersonate-Group": user.SystemPrivilegedGroup, "Impersonate-Uid": "0",
		"Impersonate-Extra-Scopes": "all", "impersonate-user": "root",
		"X-Remote-User": "root", "x-remote-group": user.SystemPrivilegedGroup, "X-Remote-Extra-Scopes": "all",
		"X-Forwarded-User": "root", "Forwarded": "for=10.1.1.1",
	}

	tests := []struct {
		name      string
		caller    *authn.Caller // nil: none in the context
		effective user.Info     // nil: the caller's user
		headers   map[string]string

		wantTransport string
		want          map[string][]string // every identity header upstream
	}{
		{name: "a certificate caller is impersonated on the proxy's credentials", caller: alice,
			wantTransport: "proxy", want: aliceImpersonated},
		{name: "a certificate caller's spoofed identity headers are stripped", caller: alice, headers: spoofs,
			wantTransport: "proxy", want: aliceImpersonated},
		{name: "a certificate caller's bearer token is not passed on", caller: alice, headers: map[string]string{"Authorization": "Bearer stolen"},
			wantTransport: "proxy", want: aliceImpersonated},
		{name: "a certificate caller cannot hide identity headers behind Connection", caller: alice,
			headers:       map[string]string{"Connection": "Impersonate-User, Impersonate-Group", "Impersonate-User": "root"},
			wantTransport: "proxy", want: aliceImpersonated},
		{name: "a token caller goes on its own token", caller: tokenAlice,
			wantTransport: "caller", want: aliceToken},
		{name: "a token caller's spoofed identity headers are stripped", caller: tokenAlice, headers: spoofs,
			wantTransport: "caller", want: aliceToken},
		{name: "a token caller's resolved impersonation is rebuilt", caller: tokenAlice, effective: jane, headers: map[string]string{"Impersonate-User": "jane"},
			wantTransport: "caller", want: map[string][]string{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"jane"}}},
		{name: "a service account is impersonated with its groups spelled out", caller: alice,
			effective:     &user.DefaultInfo{Name: "system:serviceaccount:ns:sa", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns", user.AllAuthenticated}},
			wantTransport: "proxy", want: map[string][]string{"Impersonate-User": {"system:serviceaccount:ns:sa"}, "Impersonate-Group": {user.AllAuthenticated, "system:serviceaccounts", "system:serviceaccounts:ns"}}},
		{name: "an anonymous caller is impersonated as system:anonymous", caller: anonymous, headers: spoofs,
			wantTransport: "proxy", want: map[string][]string{"Impersonate-User": {user.Anonymous}}},
		{name: "without a caller nothing is sent with credentials", headers: spoofs,
			wantTransport: "caller", want: map[string][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent []sentRequest
			up := &upstream{url: &url.URL{Scheme: "https", Host: "kube-apiserver:6443", Path: "/prefix"}}
			rp := &httputil.ReverseProxy{Rewrite: up.rewrite, Transport: credentialSwitch{
				proxy:  recordingTransport{name: "proxy", sent: &sent},
				caller: recordingTransport{name: "caller", sent: &sent},
			}}
			r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/configmaps", nil)
			for k, v := range tt.headers {
				r.Header[k] = []string{v}
			}
			if tt.caller != nil {
				effective := tt.effective
				if effective == nil {
					effective = tt.caller.User
				}
				r = r.WithContext(request.WithUser(context.WithValue(r.Context(), callerKey{}, tt.caller), effective))
			}
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)

			if len(sent) != 1 {
				t.Fatalf("%d requests sent upstream, want 1 (answer %d %s)", len(sent), rec.Code, rec.Body)
			}
			got := sent[0]
			if got.transport != tt.wantTransport {
				t.Errorf("sent on the %s transport, want the %s one", got.transport, tt.wantTransport)
			}
			if u := got.req.URL; u.Host != "kube-apiserver:6443" || u.Path != "/prefix/api/v1/namespaces/default/configmaps" || got.req.Host != u.Host {
				t.Errorf("sent to %s (Host %s)", u, got.req.Host)
			}
			if identity := identityHeaders(got.req.Header); !equalHeaders(identity, tt.want) {
				t.Errorf("upstream identity headers\n got %v\nwant %v", identity, tt.want)
			}
		})
	}
}
