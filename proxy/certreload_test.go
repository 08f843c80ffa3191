package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

// writeServingPair writes a new serving pair and returns its serial.
func writeServingPair(t *testing.T, certFile, keyFile string) int64 {
	t.Helper()
	certPEM, keyPEM := testpki.ServingPair(t, "kausality-proxy")
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	// Write to temp files and rename, as cert rotators and mounted Secrets do.
	for path, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	return cert.SerialNumber.Int64()
}

// The serving certificate is reloaded from disk without a restart.
func TestServingCertificateHotReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeServingPair(t, certFile, keyFile)
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
	if got := served(); got != first {
		t.Fatalf("served serial %d, want %d", got, first)
	}
	second := writeServingPair(t, certFile, keyFile)
	deadline := time.Now().Add(90 * time.Second) // a hang guard: the library also re-reads every minute
	for served() != second {
		if time.Now().After(deadline) {
			t.Fatal("the rotated serving certificate was never served")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
