package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeServingPair(t *testing.T, certFile, keyFile string, serial int64) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "kausality-proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	// Write to temp files and rename, as cert rotators and mounted Secrets do.
	for path, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
}

// The serving certificate is reloaded from disk without a restart.
func TestServingCertificateHotReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeServingPair(t, certFile, keyFile, 1001)
	f := startChain(t, func(o *Options) {
		o.SecureServing.ServerCert.CertKey.CertFile = certFile
		o.SecureServing.ServerCert.CertKey.KeyFile = keyFile
	})
	served := func() int64 {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(f.url, "https://"), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := served(); got != 1001 {
		t.Fatalf("served serial %d, want 1001", got)
	}
	writeServingPair(t, certFile, keyFile, 2002)
	deadline := time.Now().Add(90 * time.Second) // a hang guard: the library also re-reads every minute
	for served() != 2002 {
		if time.Now().After(deadline) {
			t.Fatal("the rotated serving certificate was never served")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
