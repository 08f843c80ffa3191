package proxy

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// An answer to a write that breaks off half-way reaches the caller as a
// 502 Status saying the write may have been applied, not as a reset
// stream; a whole answer passes unchanged.
func TestBrokenWriteAnswerBecomesAStatus(t *testing.T) {
	up := newPolicyUpstream(t)
	_, addr := startServer(t, up.srv)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // the test checks answers, not the server's identity
		ForceAttemptHTTP2: true,
	}}
	post := func(path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "https://"+addr+path, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer writer-token")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("POST %s: reading the answer: %v", path, err)
		}
		return resp.StatusCode, body
	}

	code, body := post("/whole-answer")
	if code != http.StatusOK || string(body) != `{"whole":true}` {
		t.Fatalf("a whole answer: %d %s", code, body)
	}

	code, body = post("/broken-answer")
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil {
		t.Fatalf("a broken answer: %d %q is not a Status: %v", code, body, err)
	}
	if code != http.StatusBadGateway || status.Code != http.StatusBadGateway || !strings.Contains(status.Message, "may have been applied") {
		t.Fatalf("a broken answer: %d %+v", code, status)
	}
}

// brokenBody gives its data, then fails as a cut connection does.
type brokenBody struct {
	io.Reader
	closed bool
}

func (b *brokenBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if errors.Is(err, io.EOF) {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *brokenBody) Close() error { b.closed = true; return nil }

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestForwardResponse(t *testing.T) {
	large := strings.Repeat("x", maxBufferedAnswer+10)
	tests := []struct {
		name        string
		method      string
		subresource string
		code        int
		body        string
		length      int64 // -1: unknown
		broken      bool

		wantErr      string // part of the error; "" none
		wantBuffered bool   // read whole, and the upstream body closed
	}{
		{name: "a read streams", method: http.MethodGet, code: http.StatusOK, body: `{"items":[]}`, length: -1},
		{name: "a write's answer is read whole", method: http.MethodPost, code: http.StatusCreated, body: `{"kind":"ConfigMap"}`, length: 20, wantBuffered: true},
		{name: "a write's answer of unknown length is read whole", method: http.MethodPut, code: http.StatusOK, body: `{"kind":"ConfigMap"}`, length: -1, wantBuffered: true},
		{name: "a write's error answer is read whole", method: http.MethodPatch, code: http.StatusConflict, body: `{"kind":"Status"}`, length: -1, wantBuffered: true},
		{name: "a write's answer that breaks off is an error", method: http.MethodPost, code: http.StatusCreated, body: `{"kind":"Con`, length: 40, broken: true,
			wantErr: "broke off after 12 bytes, and the write may have been applied"},
		{name: "a delete's answer that breaks off is an error", method: http.MethodDelete, code: http.StatusOK, body: `{`, length: -1, broken: true,
			wantErr: "may have been applied"},
		{name: "the proxy subresource streams", method: http.MethodPost, subresource: "proxy", code: http.StatusOK, body: "not the API's", length: -1, broken: true},
		{name: "a write's answer announced larger than the bound streams", method: http.MethodPost, code: http.StatusOK, body: "{}", length: maxBufferedAnswer + 1},
		{name: "a write's answer found larger than the bound streams whole", method: http.MethodDelete, code: http.StatusOK, body: large, length: -1},
		{name: "a redirect is refused", method: http.MethodGet, code: http.StatusFound, length: -1, wantErr: errUpstreamRedirect.Error()},
		{name: "a redirect to a write is refused", method: http.MethodPost, code: http.StatusTemporaryRedirect, length: -1, wantErr: errUpstreamRedirect.Error()},
		{name: "not modified is no redirect", method: http.MethodGet, code: http.StatusNotModified, length: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "/api/v1/namespaces/default/configmaps", nil)
			if tt.subresource != "" {
				req = req.WithContext(request.WithRequestInfo(req.Context(), &request.RequestInfo{IsResourceRequest: true, Resource: "services", Subresource: tt.subresource}))
			}
			var upstreamBody io.ReadCloser
			var closed func() bool
			if tt.broken {
				b := &brokenBody{Reader: strings.NewReader(tt.body)}
				upstreamBody, closed = b, func() bool { return b.closed }
			} else {
				b := &closeRecorder{Reader: strings.NewReader(tt.body)}
				upstreamBody, closed = b, func() bool { return b.closed }
			}
			resp := &http.Response{StatusCode: tt.code, Header: http.Header{}, Body: upstreamBody, ContentLength: tt.length, Request: req}

			err := forwardResponse(resp)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				if !closed() {
					t.Error("the upstream body of a refused answer was left open")
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			// An answer found too large is passed on as what was read
			// followed by the rest: replaced, but not buffered.
			wantReplaced := tt.wantBuffered || tt.body == large
			if replaced := resp.Body != upstreamBody; replaced != wantReplaced {
				t.Errorf("answer body replaced: %v, want %v", replaced, wantReplaced)
			}
			if tt.wantBuffered {
				if !closed() || resp.ContentLength != int64(len(tt.body)) {
					t.Errorf("buffered answer: upstream body closed %v, length %d, want closed and %d", closed(), resp.ContentLength, len(tt.body))
				}
			}
			if tt.broken {
				return
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(got, []byte(tt.body)) {
				t.Errorf("the caller would get %d bytes (%v), want the upstream's %d", len(got), err, len(tt.body))
			}
		})
	}
}

// A write's answer gives its buffer back when closed; whoever still holds
// the body then reads nothing, never the bytes of a later answer.
func TestBufferedAnswerAfterClose(t *testing.T) {
	req := httptest.NewRequest(http.MethodPatch, "/api/v1/namespaces/default/configmaps/a", nil)
	first := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"first":true}`)), ContentLength: -1, Request: req}
	if err := forwardResponse(first); err != nil {
		t.Fatal(err)
	}
	if err := first.Body.Close(); err != nil {
		t.Fatal(err)
	}
	second := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"second":true}`)), ContentLength: -1, Request: req}
	if err := forwardResponse(second); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(first.Body); err != nil || len(got) != 0 {
		t.Errorf("a closed answer read %q (%v), want nothing", got, err)
	}
	if got, err := io.ReadAll(second.Body); err != nil || string(got) != `{"second":true}` {
		t.Errorf("the next answer read %q (%v)", got, err)
	}
	_ = second.Body.Close()
	_ = second.Body.Close() // ReverseProxy and its error paths may both close
}

// Answers being passed on at once keep their own bytes: a buffer is
// reused only once its answer was closed.
func TestBufferedAnswersApart(t *testing.T) {
	req := httptest.NewRequest(http.MethodPatch, "/api/v1/namespaces/default/configmaps/a", nil)
	var answers []*http.Response
	for i := range 8 {
		body := fmt.Sprintf(`{"answer":%d}`, i)
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}
		if err := forwardResponse(resp); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, resp)
	}
	for i, resp := range answers {
		got, err := io.ReadAll(resp.Body)
		if want := fmt.Sprintf(`{"answer":%d}`, i); err != nil || string(got) != want {
			t.Errorf("answer %d reads %q (%v), want %q", i, got, err, want)
		}
		_ = resp.Body.Close()
	}
}

func BenchmarkReadWriteAnswer(b *testing.B) {
	answer := []byte(`{"kind":"ReplicaSet","apiVersion":"apps/v1","metadata":{"name":"pool-1","namespace":"bench-pass"}` + strings.Repeat(" ", 1800) + `}`)
	req := httptest.NewRequest(http.MethodPatch, "/apis/apps/v1/namespaces/bench-pass/replicasets/pool-1", nil)
	b.ReportAllocs()
	for b.Loop() {
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(answer)), ContentLength: int64(len(answer)), Request: req}
		if err := forwardResponse(resp); err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		_ = resp.Body.Close()
	}
}
