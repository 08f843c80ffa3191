package authn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

type countingAuthenticator struct {
	calls int
	ok    bool
	err   error
}

func (c *countingAuthenticator) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	c.calls++
	if !c.ok {
		return nil, false, c.err
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
}

func certRequest(raw string, notAfter time.Time) *http.Request {
	return &http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Raw: []byte(raw), NotAfter: notAfter}}}}
}

func TestVerifiedCertCache(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bundle := []byte("ca-1")
	inner := &countingAuthenticator{ok: true}
	c := newVerifiedCertCache(inner, func() []byte { return bundle })
	c.now = func() time.Time { return now }
	far := now.Add(24 * time.Hour)

	mustAuth := func(r *http.Request) {
		t.Helper()
		resp, ok, err := c.AuthenticateRequest(r)
		if err != nil || !ok || resp.User.GetName() != "alice" {
			t.Fatalf("got %v %v %v", resp, ok, err)
		}
	}
	mustAuth(certRequest("cert-a", far))
	mustAuth(certRequest("cert-a", far))
	if inner.calls != 1 {
		t.Fatalf("the same certificate was verified %d times, want 1", inner.calls)
	}
	mustAuth(certRequest("cert-b", far))
	if inner.calls != 2 {
		t.Fatalf("a different certificate must be verified: %d calls", inner.calls)
	}
	bundle = []byte("ca-2") // the client CA was reloaded
	mustAuth(certRequest("cert-a", far))
	if inner.calls != 3 {
		t.Fatalf("a CA reload must force verification: %d calls", inner.calls)
	}
	now = now.Add(2 * verifiedCertTTL)
	mustAuth(certRequest("cert-a", far))
	if inner.calls != 4 {
		t.Fatalf("an entry outlived the TTL: %d calls", inner.calls)
	}
	// A certificate about to expire is cached no longer than its validity.
	soon := now.Add(time.Second)
	mustAuth(certRequest("cert-c", soon))
	now = now.Add(2 * time.Second)
	mustAuth(certRequest("cert-c", soon))
	if inner.calls != 6 {
		t.Fatalf("an entry outlived its certificate: %d calls", inner.calls)
	}
	// No certificate: not cached, passed through.
	mustAuth(&http.Request{})
	mustAuth(&http.Request{})
	if inner.calls != 8 {
		t.Fatalf("requests without a certificate must not be cached: %d calls", inner.calls)
	}

	// Failures are never cached.
	failing := &countingAuthenticator{err: errors.New("x509: certificate signed by unknown authority")}
	c = newVerifiedCertCache(failing, func() []byte { return bundle })
	for i := 0; i < 3; i++ {
		if _, ok, err := c.AuthenticateRequest(certRequest("bad", far)); ok || err == nil {
			t.Fatal("a failed verification succeeded")
		}
	}
	if failing.calls != 3 {
		t.Fatalf("failures were cached: %d calls", failing.calls)
	}
}
