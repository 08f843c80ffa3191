package proxy

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// flushCounter is a caller's connection that counts the flushes it is
// asked for.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushCounter) Flush() { f.flushes++; f.ResponseRecorder.Flush() }

// A write's answer is read whole, so it is written once, without a flush
// that would split it into more frames; a read still streams, flushed as
// it is copied.
func TestWriteAnswerIsWrittenWithoutFlushes(t *testing.T) {
	const answer = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"}}`
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	up, err := newUpstream(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, subresource string
		flushed             bool
	}{
		{http.MethodPatch, "", false},
		{http.MethodPost, "", false},
		{http.MethodDelete, "", false},
		{http.MethodGet, "", true},
		{http.MethodPost, "proxy", true}, // not the API's answer: streamed as it comes
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.subresource, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "/api/v1/namespaces/default/configmaps/c", strings.NewReader(`{}`))
			r = r.WithContext(request.WithRequestInfo(r.Context(), &request.RequestInfo{IsResourceRequest: true, Resource: "configmaps", Subresource: tt.subresource}))
			rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
			up.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK || rec.Body.String() != answer {
				t.Fatalf("answered %d %q, want the upstream's answer", rec.Code, rec.Body)
			}
			if flushed := rec.flushes > 0; flushed != tt.flushed {
				t.Errorf("flushed %d times, want flushes: %v", rec.flushes, tt.flushed)
			}
		})
	}
}
