package authn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

// Header and identity handling, per request, as the proxy does it for
// every call (reads included).

// benchClientCert returns a CA provider and a client certificate it signed
// (CN bench, O dev and ops), like kube-controller-manager's.
func benchClientCert(b *testing.B) (dynamiccertificates.CAContentProvider, *x509.Certificate) {
	b.Helper()
	ca := testpki.NewCA(b, "bench-ca")
	cert, _ := ca.Issue(b, testpki.Options{CN: "bench", Orgs: []string{"dev", "ops"}})
	provider, err := dynamiccertificates.NewStaticCAContent("bench-ca", ca.PEM)
	if err != nil {
		b.Fatal(err)
	}
	return provider, cert
}

// kubectlHeaders are the headers of a typical client-go request.
func kubectlHeaders() http.Header {
	return http.Header{
		"Accept":          {"application/json, */*"},
		"User-Agent":      {"kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/abcdef/system:serviceaccount:kube-system:replicaset-controller"},
		"Accept-Encoding": {"gzip"},
		"Content-Type":    {"application/vnd.kubernetes.protobuf"},
		"Authorization":   {"Bearer token-of-the-caller"},
	}
}

func BenchmarkAuthenticateRequest(b *testing.B) {
	ca, cert := benchClientCert(b)
	reviews := newFakeTokenReviews(map[string]authenticationv1.UserInfo{
		"good-token": {Username: "system:serviceaccount:kube-system:replicaset-controller", UID: "uid", Groups: []string{"system:serviceaccounts", "system:authenticated"}},
	})
	a, err := New(Config{ClientCA: ca, TokenReviews: reviews.AuthenticationV1().TokenReviews(), WebhookRetryBackoff: noRetry})
	if err != nil {
		b.Fatal(err)
	}
	x509Req := httptest.NewRequest(http.MethodGet, "https://proxy/api/v1/namespaces/default/configmaps/x", nil)
	x509Req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	tokenReq := httptest.NewRequest(http.MethodGet, "https://proxy/api/v1/namespaces/default/configmaps/x", nil)
	tokenReq.TLS = &tls.ConnectionState{}
	tokenReq.Header.Set("Authorization", "Bearer good-token")

	for _, c := range []struct {
		name string
		r    *http.Request
	}{{"X509", x509Req}, {"TokenCached", tokenReq}} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := a.AuthenticateRequest(c.r); err != nil { // fills the token cache
				b.Fatal(err)
			}
			before := reviews.callCount()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.AuthenticateRequest(c.r); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(reviews.callCount()-before)/float64(b.N), "reviews/op")
		})
	}
}

func BenchmarkResolveImpersonation(b *testing.B) {
	sars := newFakeSARs(func(authorizationv1.SubjectAccessReviewSpec) (bool, string) { return true, "" })
	a, err := New(Config{SubjectAccessReviews: sars.AuthorizationV1().SubjectAccessReviews(), WebhookRetryBackoff: noRetry})
	if err != nil {
		b.Fatal(err)
	}
	caller := &Caller{Method: MethodX509, User: &user.DefaultInfo{Name: "alice", Groups: []string{"impersonators", "system:authenticated"}}}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		h    http.Header
	}{
		{"None", kubectlHeaders()},
		{"UserAndGroupCached", http.Header{"Impersonate-User": {"jane"}, "Impersonate-Group": {"viewers"}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := a.ResolveImpersonation(ctx, caller, c.h); err != nil {
				b.Fatal(err)
			}
			before := len(sars.recorded())
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.ResolveImpersonation(ctx, caller, c.h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(sars.recorded())-before)/float64(b.N), "reviews/op")
		})
	}
}

func BenchmarkSanitizeInbound(b *testing.B) {
	hostile := kubectlHeaders()
	hostile["Connection"] = []string{"Impersonate-User, X-Custom"}
	hostile["X-Custom"] = []string{"1"}
	hostile["Impersonate-User"] = []string{"system:admin"}
	hostile["X-Remote-User"] = []string{"system:admin"}
	hostile["X-Forwarded-For"] = []string{"10.0.0.1"}
	upgrade := kubectlHeaders()
	upgrade["Connection"] = []string{"Upgrade"}
	upgrade["Upgrade"] = []string{"SPDY/3.1"}
	upgrade["X-Stream-Protocol-Version"] = []string{"v4.channel.k8s.io"}
	for _, c := range []struct {
		name string
		h    http.Header
	}{{"Typical", kubectlHeaders()}, {"Hostile", hostile}, {"Upgrade", upgrade}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h := c.h.Clone() // the proxy sanitizes the outbound copy
				SanitizeInbound(h)
			}
		})
	}
}

func BenchmarkApplyUpstreamIdentity(b *testing.B) {
	sa := &user.DefaultInfo{
		Name: "system:serviceaccount:kube-system:replicaset-controller", UID: "9d3c",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=abc"}},
	}
	for _, c := range []struct {
		name   string
		caller *Caller
	}{
		{"X509Impersonated", &Caller{Method: MethodX509, User: sa}},
		{"TokenPassthrough", &Caller{Method: MethodToken, User: sa, Token: "token-of-the-caller"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			base := kubectlHeaders()
			SanitizeInbound(base)
			b.ReportAllocs()
			for b.Loop() {
				h := base.Clone()
				ApplyUpstreamIdentity(h, c.caller, sa)
			}
		})
	}
}
