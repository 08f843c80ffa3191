// Package testpki issues throwaway certificates for tests: certificate
// authorities, client certificates with a user and groups, serving
// certificates. Keys are ECDSA P-256, except where a caller asks for RSA to
// look like a kubeadm CA.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

func init() { serial.Store(time.Now().UnixNano()) }

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is the CA certificate, PEM-encoded.
	PEM []byte
}

// NewCA returns a new self-signed CA valid for a day.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return newCA(t, cn, key, 24*time.Hour)
}

// NewRSACA returns a CA with an RSA key valid for ten years, as kubeadm
// writes one.
func NewRSACA(t testing.TB, cn string) *CA {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return newCA(t, cn, key, 10*365*24*time.Hour)
}

func newCA(t testing.TB, cn string, key crypto.Signer, validity time.Duration) *CA {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: CertPEM(cert)}
}

// Options describe a certificate to issue. Zero values get defaults: valid
// from an hour ago for an hour, for client authentication.
type Options struct {
	CN        string
	Orgs      []string
	NotBefore time.Time
	NotAfter  time.Time
	Usage     []x509.ExtKeyUsage
	DNSNames  []string
	IPs       []net.IP
}

// Issue signs a certificate for a new key; a nil ca makes it self-signed.
func (ca *CA) Issue(t testing.TB, o Options) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(time.Hour)
	}
	if o.Usage == nil {
		o.Usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: o.CN, Organization: o.Orgs},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  o.Usage,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	parent, signer := tmpl, crypto.Signer(key)
	if ca != nil {
		parent, signer = ca.Cert, ca.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// ClientCert is a TLS client certificate for user cn in groups orgs; a nil
// ca makes it self-signed.
func (ca *CA) ClientCert(t testing.TB, cn string, orgs ...string) tls.Certificate {
	t.Helper()
	cert, key := ca.Issue(t, Options{CN: cn, Orgs: orgs})
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// ServingPair is a self-signed serving certificate for localhost and
// 127.0.0.1, PEM-encoded.
func ServingPair(t testing.TB, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	cert, key := (*CA)(nil).Issue(t, Options{CN: cn, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	return CertPEM(cert), KeyPEM(t, key)
}

// CertPEM encodes cert.
func CertPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// KeyPEM encodes key: EC keys as "EC PRIVATE KEY", RSA keys as PKCS#1
// "RSA PRIVATE KEY", the forms kubeadm and client-go write.
func KeyPEM(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	}
	t.Fatalf("unsupported key type %T", key)
	return nil
}
