package authn

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/authenticator"
)

// Verifying a client certificate chain (an ECDSA or RSA signature check per
// certificate) is the largest CPU cost of a proxied GET. A controller
// presents the same certificate on every request, so successful
// verifications are remembered for a short time.
//
// The key is a hash of the CA bundle in force and of every certificate the
// client presented, so a CA reload or a different chain is a cache miss and
// is verified afresh. Entries never outlive the earliest NotAfter of the
// presented certificates, nor verifiedCertTTL. Failures are never cached:
// they must stay cheap to retry and say exactly what is wrong.
//
// A connection hands every request on it the same parsed certificates, so
// a second cache is keyed by the leaf certificate's address: a request on a
// connection whose chain was verified under the same CA bundle costs a
// lookup, not a hash of every certificate. It holds the same verifications
// as the first, under the same bounds.
const (
	verifiedCertTTL  = time.Minute
	verifiedCertSize = 4096
	// Entries by leaf keep parsed certificates alive (a few KiB each) for
	// at most verifiedCertTTL after their connection closed.
	verifiedLeafSize = 1024
)

type verifiedCertCache struct {
	next     authenticator.Request
	caBundle func() []byte
	cache    *utilcache.LRUExpireCache // by the digest of CA bundle and chain
	byLeaf   *utilcache.LRUExpireCache // by the leaf's *x509.Certificate
	now      func() time.Time

	// ca is the digest of the CA bundle last seen; the bundle changes only
	// on a reload.
	ca atomic.Pointer[caDigest]
}

type caDigest struct {
	bundle []byte
	sum    [sha256.Size]byte
}

// parsedChain is a verification remembered for the certificates a
// connection presented, as parsed for it.
type parsedChain struct {
	chain []*x509.Certificate
	ca    [sha256.Size]byte
	resp  *authenticator.Response
}

func newVerifiedCertCache(next authenticator.Request, caBundle func() []byte) *verifiedCertCache {
	c := &verifiedCertCache{next: next, caBundle: caBundle, now: time.Now}
	c.cache = utilcache.NewLRUExpireCacheWithClock(verifiedCertSize, cacheClock{c})
	c.byLeaf = utilcache.NewLRUExpireCacheWithClock(verifiedLeafSize, cacheClock{c})
	return c
}

// cacheClock lets tests move the cache's time with c.now.
type cacheClock struct{ c *verifiedCertCache }

func (k cacheClock) Now() time.Time { return k.c.now() }

func (c *verifiedCertCache) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return c.next.AuthenticateRequest(req)
	}
	certs := req.TLS.PeerCertificates
	ca := c.caDigest()
	if v, ok := c.byLeaf.Get(certs[0]); ok {
		if p := v.(*parsedChain); p.ca == ca.sum && slices.Equal(p.chain, certs) {
			return p.resp, true, nil
		}
	}
	h := sha256.New()
	h.Write(ca.sum[:])
	expires := c.now().Add(verifiedCertTTL)
	for _, cert := range certs {
		sum := sha256.Sum256(cert.Raw)
		h.Write(sum[:])
		if cert.NotAfter.Before(expires) {
			expires = cert.NotAfter
		}
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	remember := func(resp *authenticator.Response) {
		if ttl := expires.Sub(c.now()); ttl > 0 {
			c.byLeaf.Add(certs[0], &parsedChain{chain: slices.Clone(certs), ca: ca.sum, resp: resp}, ttl)
		}
	}
	if v, ok := c.cache.Get(key); ok {
		resp := v.(*authenticator.Response)
		remember(resp)
		return resp, true, nil
	}
	resp, ok, err := c.next.AuthenticateRequest(req)
	if ok && err == nil && resp != nil {
		if ttl := expires.Sub(c.now()); ttl > 0 {
			c.cache.Add(key, resp, ttl)
		}
		remember(resp)
	}
	return resp, ok, err
}

// caDigest is the digest of the CA bundle in force, hashed again only
// when the bundle changed.
func (c *verifiedCertCache) caDigest() *caDigest {
	bundle := c.caBundle()
	if d := c.ca.Load(); d != nil && bytes.Equal(d.bundle, bundle) {
		return d
	}
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(bundle)))) //nolint:gosec // a CA bundle is far below 4 GiB; the length only separates fields
	h.Write(bundle)
	d := &caDigest{bundle: bytes.Clone(bundle)}
	h.Sum(d.sum[:0])
	c.ca.Store(d)
	return d
}
