package authn

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
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
const (
	verifiedCertTTL  = time.Minute
	verifiedCertSize = 4096
)

type verifiedCertCache struct {
	next     authenticator.Request
	caBundle func() []byte
	cache    *utilcache.LRUExpireCache
	now      func() time.Time
}

func newVerifiedCertCache(next authenticator.Request, caBundle func() []byte) *verifiedCertCache {
	c := &verifiedCertCache{next: next, caBundle: caBundle, now: time.Now}
	c.cache = utilcache.NewLRUExpireCacheWithClock(verifiedCertSize, cacheClock{c})
	return c
}

// cacheClock lets tests move the cache's time with c.now.
type cacheClock struct{ c *verifiedCertCache }

func (k cacheClock) Now() time.Time { return k.c.now() }

func (c *verifiedCertCache) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return c.next.AuthenticateRequest(req)
	}
	h := sha256.New()
	ca := c.caBundle()
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(ca)))) //nolint:gosec // a CA bundle is far below 4 GiB; the length only separates fields
	h.Write(ca)
	expires := c.now().Add(verifiedCertTTL)
	for _, cert := range req.TLS.PeerCertificates {
		sum := sha256.Sum256(cert.Raw)
		h.Write(sum[:])
		if cert.NotAfter.Before(expires) {
			expires = cert.NotAfter
		}
	}
	var key [sha256.Size]byte
	copy(key[:], h.Sum(nil))
	if v, ok := c.cache.Get(key); ok {
		return v.(*authenticator.Response), true, nil
	}
	resp, ok, err := c.next.AuthenticateRequest(req)
	if ok && err == nil && resp != nil {
		if ttl := expires.Sub(c.now()); ttl > 0 {
			c.cache.Add(key, resp, ttl)
		}
	}
	return resp, ok, err
}
