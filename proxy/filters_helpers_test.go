package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recordingNext is the next handler of a filter under test: it records the
// request it was given, and how many bytes of the body it read.
type recordingNext struct {
	called    bool
	req       *http.Request
	bodyBytes atomic.Int64
}

func (n *recordingNext) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n.called = true
	n.req = r
	if r.Body != nil {
		read, _ := io.Copy(io.Discard, r.Body)
		n.bodyBytes.Add(read)
	}
	w.WriteHeader(http.StatusOK)
}

// countingBody counts the bytes anyone read from a request body: a denial
// must read none, so that none can go upstream.
type countingBody struct {
	io.Reader
	read atomic.Int64
}

func newCountingBody(s string) *countingBody { return &countingBody{Reader: strings.NewReader(s)} }

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return nil }

// filterRequest is a POST with a body, as a write reaches the filters.
func filterRequest(headers map[string]string, peer *x509.Certificate, body *countingBody) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps", nil)
	r.Body = body
	for k, v := range headers {
		r.Header[k] = []string{v}
	}
	if peer != nil {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{peer}}
	}
	return r
}

// wantDenial checks that rec holds a Status with code, and that the next
// handler got nothing: not the request, not a byte of its body.
func wantDenial(t *testing.T, rec *httptest.ResponseRecorder, code int, next *recordingNext, body *countingBody) {
	t.Helper()
	if rec.Code != code {
		t.Fatalf("answered %d %s, want %d", rec.Code, rec.Body, code)
	}
	var st metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" || int(st.Code) != code || st.Message == "" {
		t.Fatalf("the answer is not a Status with code %d and a message (%v): %s", code, err, rec.Body)
	}
	if next.called {
		t.Fatalf("the next handler was called for a denied request")
	}
	if n := body.read.Load(); n != 0 {
		t.Fatalf("%d bytes of a denied request's body were read", n)
	}
}
