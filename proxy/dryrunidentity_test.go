package proxy

import (
	"bytes"
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
	interceptupstream "github.com/kausality-io/kausality-proxy/intercept/upstream"
)

// A server-side dry run the write path makes as the caller goes through the
// same Rewrite as the forwarded write: the caller's spoofed identity
// headers never reach kube-apiserver, and it is a dry run on the wire.
func TestDryRunAsTheCallerCarriesOnlyTheCallersIdentity(t *testing.T) {
	alice := &authn.Caller{Method: authn.MethodX509, User: &user.DefaultInfo{Name: "alice", Groups: []string{"devs", user.AllAuthenticated}}}
	for _, method := range []string{http.MethodPatch, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			var (
				sent []sentRequest
				body []byte
			)
			up := &upstream{url: &url.URL{Scheme: "https", Host: "kube-apiserver:6443"}}
			rp := &httputil.ReverseProxy{Rewrite: up.rewrite, Transport: credentialSwitch{
				proxy:  bodyKeepingTransport{next: recordingTransport{name: "proxy", sent: &sent}, body: &body},
				caller: recordingTransport{name: "caller", sent: &sent},
			}}
			up.plain, up.watch, up.write = rp, rp, rp
			r := httptest.NewRequest(method, "/api/v1/namespaces/ns/configmaps/c", strings.NewReader(`{}`))
			r.Header["Impersonate-User"] = []string{"system:admin"}
			r.Header["impersonate-group"] = []string{user.SystemPrivilegedGroup}
			r.Header["X-Remote-User"] = []string{"root"}
			r.Header["Authorization"] = []string{"Bearer stolen"}
			r.Header["Connection"] = []string{"Impersonate-User, Authorization"}
			r = r.WithContext(request.WithUser(context.WithValue(r.Context(), callerKey{}, alice), alice.User))

			answer, err := interceptupstream.Forwarder{Next: up}.DryRun(r, []byte(`{}`), 1<<20)
			if err != nil || !answer.Succeeded() {
				t.Fatalf("dry run: %v %v", err, answer)
			}
			if len(sent) != 1 || sent[0].transport != "proxy" {
				t.Fatalf("sent %+v", sent)
			}
			got := identityHeaders(sent[0].req.Header)
			want := map[string][]string{"Impersonate-User": {"alice"}, "Impersonate-Group": {"devs"}}
			if !equalHeaders(got, want) {
				t.Fatalf("identity upstream\n got %v\nwant %v", got, want)
			}
			// A DELETE with a body takes its options from the body alone.
			if method != http.MethodDelete && sent[0].req.URL.Query().Get("dryRun") != "All" {
				t.Fatalf("not a dry run: %s", sent[0].req.URL)
			}
			if method == http.MethodDelete {
				if !strings.Contains(string(body), `"dryRun":["All"]`) {
					t.Fatalf("not a dry run: body %q", body)
				}
			}
		})
	}
}

// bodyKeepingTransport keeps the body of what it sends through next.
type bodyKeepingTransport struct {
	next http.RoundTripper
	body *[]byte
}

func (t bodyKeepingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		data, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		*t.body = data
		r.Body = io.NopCloser(bytes.NewReader(data))
	}
	return t.next.RoundTrip(r)
}
