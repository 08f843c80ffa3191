package proxy

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
