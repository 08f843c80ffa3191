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

// TestVerifiedCertCacheByConnection covers the requests of one connection,
// which all carry the same parsed certificates.
func TestVerifiedCertCacheByConnection(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	far := now.Add(24 * time.Hour)
	bundle := []byte("ca-1")
	inner := &countingAuthenticator{ok: true}
	c := newVerifiedCertCache(inner, func() []byte { return bundle })
	c.now = func() time.Time { return now }
	leaf := &x509.Certificate{Raw: []byte("leaf"), NotAfter: far}
	intermediate := &x509.Certificate{Raw: []byte("intermediate"), NotAfter: far}
	conn := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf, intermediate}}
	onConn := func(cs *tls.ConnectionState) *http.Request { return &http.Request{TLS: cs} }

	steps := []struct {
		name   string
		before func()
		req    *http.Request
		calls  int
	}{
		{"first request verifies", nil, onConn(conn), 1},
		{"the next request on the connection does not", nil, onConn(conn), 1},
		{"a CA reload verifies again", func() { bundle = []byte("ca-2") }, onConn(conn), 2},
		{"under the new CA it is remembered", nil, onConn(conn), 2},
		{"the same leaf with another intermediate verifies", nil,
			onConn(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf, {Raw: []byte("other"), NotAfter: far}}}), 3},
		{"the leaf alone verifies", nil, onConn(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}), 4},
		{"the connection's chain is still remembered", nil, onConn(conn), 4},
		{"after the TTL it verifies again", func() { now = now.Add(2 * verifiedCertTTL) }, onConn(conn), 5},
		{"a new connection with the same certificates does not", nil,
			onConn(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{
				{Raw: []byte("leaf"), NotAfter: far}, {Raw: []byte("intermediate"), NotAfter: far}}}), 5},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		resp, ok, err := c.AuthenticateRequest(s.req)
		if err != nil || !ok || resp.User.GetName() != "alice" {
			t.Fatalf("%s: got %v %v %v", s.name, resp, ok, err)
		}
		if inner.calls != s.calls {
			t.Fatalf("%s: %d verifications, want %d", s.name, inner.calls, s.calls)
		}
	}

	// A certificate that expires is not remembered past its NotAfter, on
	// its connection either.
	soon := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Raw: []byte("soon"), NotAfter: now.Add(time.Second)}}}
	for range 2 {
		if _, ok, err := c.AuthenticateRequest(onConn(soon)); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if inner.calls != 6 {
		t.Fatalf("%d verifications, want 6", inner.calls)
	}
	now = now.Add(2 * time.Second)
	_, _, _ = c.AuthenticateRequest(onConn(soon))
	if inner.calls != 7 {
		t.Fatalf("an expired certificate was not verified again: %d verifications", inner.calls)
	}

	// A connection whose verification failed is never remembered.
	failing := &countingAuthenticator{err: errors.New("x509: certificate signed by unknown authority")}
	c = newVerifiedCertCache(failing, func() []byte { return bundle })
	for range 3 {
		if _, ok, err := c.AuthenticateRequest(onConn(conn)); ok || err == nil {
			t.Fatal("a failed verification succeeded")
		}
	}
	if failing.calls != 3 {
		t.Fatalf("failures were cached: %d calls", failing.calls)
	}
}
