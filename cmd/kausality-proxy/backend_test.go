package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// A report as the proxy sends it: marshalled from notify's types.
func sentReport(t *testing.T) string {
	t.Helper()
	r := v1alpha1.DriftReport{APIVersion: v1alpha1.DriftReportAPIVersion, Kind: v1alpha1.DriftReportKind, Spec: v1alpha1.DriftReportSpec{
		ID: "0123456789abcdef", Phase: v1alpha1.PhaseDetected,
		Parent:    v1alpha1.ParentRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "web", Generation: 3, ObservedGeneration: 3},
		Child:     v1alpha1.ChildRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "a", Name: "web-1"},
		NewObject: runtime.RawExtension{Raw: []byte(`{"kind":"ReplicaSet"}`)},
		Request:   v1alpha1.RequestInfo{User: "system:serviceaccount:kube-system:deployment-controller", Operation: "UPDATE"},
		Changes:   []desired.Change{{Path: "spec.replicas", Old: "1", New: "2"}},
	}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func status(code int, reason, message string) string {
	b, _ := json.Marshal(message)
	return `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":` + string(b) +
		`,"reason":"` + reason + `","code":` + itoa(code) + `}`
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestBackendLogHandler(t *testing.T) {
	sent := sentReport(t)
	const minimal = `{"apiVersion":"kausality.io/v1alpha1","kind":"DriftReport","spec":{"id":"ab","phase":"Resolved"}}`
	const limit = 1024
	atLimit := minimal[:len(minimal)-2] + `,"reason":"` + strings.Repeat("x", limit-len(minimal)-12) + `"}}`
	if len(atLimit) != limit {
		t.Fatalf("the at-limit report has %d bytes", len(atLimit))
	}
	for _, tc := range []struct {
		name, method, path, body string
		wantCode                 int
		wantBody                 string
		wantAllow                string
		wantPrinted              string
	}{
		{name: "report as sent", method: "POST", path: "/", body: sent, wantCode: 200, wantPrinted: sent + "\n"},
		{name: "indented report is compacted", method: "POST", path: "/driftreports",
			body:     "{\n  \"apiVersion\": \"kausality.io/v1alpha1\",\n  \"kind\": \"DriftReport\",\n  \"spec\": {\"id\": \"ab\", \"phase\": \"Resolved\"}\n}\n",
			wantCode: 200, wantPrinted: minimal + "\n"},
		{name: "unknown fields are kept", method: "POST", path: "/",
			body:     `{"apiVersion":"kausality.io/v1alpha1","kind":"DriftReport","spec":{"id":"ab","future":{"x":[1, 2]}}}`,
			wantCode: 200, wantPrinted: `{"apiVersion":"kausality.io/v1alpha1","kind":"DriftReport","spec":{"id":"ab","future":{"x":[1,2]}}}` + "\n"},
		{name: "exactly the limit", method: "POST", path: "/",
			body: atLimit, wantCode: 200, wantPrinted: atLimit + "\n"},
		{name: "wrong apiVersion", method: "POST", path: "/", body: `{"apiVersion":"v1","kind":"DriftReport","spec":{}}`,
			wantCode: 400, wantBody: status(400, "BadRequest", `apiVersion "v1", kind "DriftReport": want kausality.io/v1alpha1 DriftReport`)},
		{name: "wrong kind", method: "POST", path: "/", body: `{"apiVersion":"kausality.io/v1alpha1","kind":"Status"}`,
			wantCode: 400, wantBody: status(400, "BadRequest", `apiVersion "kausality.io/v1alpha1", kind "Status": want kausality.io/v1alpha1 DriftReport`)},
		{name: "type fields match case-sensitively", method: "POST", path: "/", body: `{"APIVERSION":"kausality.io/v1alpha1","KIND":"DriftReport"}`,
			wantCode: 400, wantBody: status(400, "BadRequest", `apiVersion "", kind "": want kausality.io/v1alpha1 DriftReport`)},
		{name: "malformed JSON", method: "POST", path: "/", body: `{"apiVersion":`,
			wantCode: 400, wantBody: status(400, "BadRequest", "the body is not a JSON object: unexpected end of JSON input")},
		{name: "empty body", method: "POST", path: "/", body: ``,
			wantCode: 400, wantBody: status(400, "BadRequest", "the body is not a JSON object: unexpected end of JSON input")},
		{name: "not an object", method: "POST", path: "/", body: `[1]`,
			wantCode: 400, wantBody: status(400, "BadRequest", "the body is not a JSON object: json: cannot unmarshal array into Go value of type map[string]json.RawMessage")},
		{name: "two objects", method: "POST", path: "/", body: minimal + minimal,
			wantCode: 400, wantBody: status(400, "BadRequest", "the body is not a JSON object: invalid character '{' after top-level value")},
		{name: "spec of the wrong type", method: "POST", path: "/", body: `{"apiVersion":"kausality.io/v1alpha1","kind":"DriftReport","spec":{"parent":{"generation":"3"}}}`,
			wantCode: 400, wantBody: status(400, "BadRequest", "not a valid DriftReport: json: cannot unmarshal string into Go struct field ParentRef.spec.parent.generation of type int64")},
		{name: "over the limit", method: "POST", path: "/", body: `{"apiVersion":"kausality.io/v1alpha1","kind":"DriftReport","spec":{"reason":"` + strings.Repeat("x", limit) + `"}}`,
			wantCode: 413, wantBody: status(413, "RequestEntityTooLarge", "the report is larger than 1024 bytes")},
		{name: "GET", method: "GET", path: "/", wantCode: 405, wantAllow: "POST",
			wantBody: status(405, "MethodNotAllowed", "GET is not supported: POST a DriftReport")},
		{name: "PUT", method: "PUT", path: "/driftreports", body: minimal, wantCode: 405, wantAllow: "POST",
			wantBody: status(405, "MethodNotAllowed", "PUT is not supported: POST a DriftReport")},
		{name: "unknown path", method: "POST", path: "/reports", body: minimal,
			wantCode: 404, wantBody: status(404, "NotFound", "no endpoint /reports: POST DriftReports to / or /driftreports")},
		{name: "healthz", method: "GET", path: "/healthz", wantCode: 200, wantBody: "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			b := newLogBackend(&out, limit, zap.NewNop(), nil)
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			b.handler().ServeHTTP(rec, req)
			if rec.Code != tc.wantCode || rec.Body.String() != tc.wantBody {
				t.Errorf("got %d %s\nwant %d %s", rec.Code, rec.Body, tc.wantCode, tc.wantBody)
			}
			if tc.wantCode >= 300 && rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q", rec.Header().Get("Content-Type"))
			}
			if got := rec.Header().Get("Allow"); got != tc.wantAllow {
				t.Errorf("Allow %q, want %q", got, tc.wantAllow)
			}
			if out.String() != tc.wantPrinted {
				t.Errorf("printed %q\nwant %q", out.String(), tc.wantPrinted)
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

// A report that cannot be printed is answered 5xx, which the proxy retries.
func TestBackendLogWriteFailure(t *testing.T) {
	b := newLogBackend(failingWriter{}, 1<<20, zap.NewNop(), nil)
	rec := httptest.NewRecorder()
	b.handler().ServeHTTP(rec, httptest.NewRequest("POST", "/", strings.NewReader(sentReport(t))))
	if want := status(500, "InternalError", "the report could not be written"); rec.Code != 500 || rec.Body.String() != want {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
}

// syncBuffer is written by the server's goroutines and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Concurrent reports come out as whole lines, and a request in flight when
// the server is told to stop is still answered and printed.
func TestBackendLogServeAndShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	b := newLogBackend(&out, 1<<20, zap.NewNop(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveUntilDone(ctx, ln, b.handler(), 10*time.Second, zap.NewNop()) }()
	url := "http://" + ln.Addr().String() + "/"
	sent := sentReport(t)

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			resp, err := http.Post(url, "application/json", strings.NewReader(sent))
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	if want := strings.Repeat(sent+"\n", 20); out.String() != want {
		t.Fatalf("printed:\n%s", out.String())
	}

	// Stopping lets requests in flight finish (http.Server.Shutdown) and
	// then closes the listener.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if _, err := http.Post(url, "application/json", strings.NewReader(sent)); err == nil {
		t.Fatal("still serving after shutdown")
	}
}

func TestBackendLogCommandFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-report-size", "0"}, "--max-report-size must be a positive number of bytes, not 0"},
		{[]string{"--max-report-size", "lots"}, `invalid argument "lots" for "--max-report-size"`},
		{[]string{"--listen", "127.0.0.1:-1", "--allow-unauthenticated"}, "invalid port"},
		{[]string{"--listen", "127.0.0.1:0"}, "--auth-token-file is required"},
		{[]string{"--auth-token-file", "/nonexistent/token"}, "--auth-token-file: open /nonexistent/token"},
		{[]string{"--auth-token-file", "/dev/null"}, "--auth-token-file /dev/null is empty"},
		{[]string{"--auth-token-file", "/dev/null", "--allow-unauthenticated"}, "contradict"},
		{[]string{"extra"}, `unknown command "extra"`},
	} {
		cmd := newRootCommand()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append([]string{"backend", "log"}, tc.args...))
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("backend log %v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

// A receiver with a token prints only what its senders post: a forged
// report from anyone else who reaches it is answered 401, unread.
func TestBackendLogRefusesForgedReports(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token, err := readSenderToken(&backendLogOptions{AuthTokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	sent := sentReport(t)
	for _, tc := range []struct {
		name, authorization string
		wantCode            int
	}{
		{name: "the senders' token", authorization: "Bearer s3cret", wantCode: 200},
		{name: "no token", wantCode: 401},
		{name: "another token", authorization: "Bearer s3cre", wantCode: 401},
		{name: "the token as basic credentials", authorization: "Basic s3cret", wantCode: 401},
		{name: "the token without the scheme", authorization: "s3cret", wantCode: 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			b := newLogBackend(&out, 1<<20, zap.NewNop(), token)
			req := httptest.NewRequest("POST", "/", strings.NewReader(sent))
			if tc.authorization != "" {
				req.Header.Set("Authorization", tc.authorization)
			}
			rec := httptest.NewRecorder()
			b.handler().ServeHTTP(rec, req)
			if rec.Code != tc.wantCode {
				t.Fatalf("got %d %s, want %d", rec.Code, rec.Body, tc.wantCode)
			}
			if tc.wantCode == 200 {
				if out.String() != sent+"\n" {
					t.Errorf("printed %q", out.String())
				}
				return
			}
			if out.Len() != 0 {
				t.Errorf("a refused report was printed: %q", out.String())
			}
			want := status(401, "Unauthorized", "a DriftReport needs the bearer token of --auth-token-file (the proxy sends the one in --drift-webhook-token-file)")
			if rec.Body.String() != want || rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("got %s (WWW-Authenticate %q), want %s", rec.Body, rec.Header().Get("WWW-Authenticate"), want)
			}
		})
	}
	// Health checks need no token.
	b := newLogBackend(io.Discard, 1<<20, zap.NewNop(), token)
	rec := httptest.NewRecorder()
	b.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 {
		t.Errorf("/healthz: %d", rec.Code)
	}
}
