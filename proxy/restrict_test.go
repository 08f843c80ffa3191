package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An identity whose values change in an HTTP header is refused before
// anything goes upstream, on the plain and on the upgrade path: on
// HTTP/1.1 kube-apiserver trims " system:masters" to system:masters.
func TestChainRefusesIdentitiesThatDoNotRoundTrip(t *testing.T) {
	f := startChain(t)
	cases := map[string][]string{
		"group with a leading space":  {"alice", " system:masters"},
		"group with a trailing space": {"alice", "system:masters "},
		"group with a tab":            {"alice", "system:\tmasters"},
		"user with a trailing space":  {"alice "},
		"user with a leading tab":     {"\talice"},
		"group with CR LF":            {"alice", "devs\r\nImpersonate-Group: system:masters"},
	}
	for name, subject := range cases {
		for _, upgrade := range []bool{false, true} {
			path := "/api/v1/namespaces/ns/configmaps"
			if upgrade {
				name += "/upgrade"
				path = "/api/v1/namespaces/ns/pods/p/exec"
			}
			t.Run(name, func(t *testing.T) {
				cert := f.ca.clientCert(t, subject[0], subject[1:]...)
				f.upstream.take()
				req, _ := http.NewRequest(http.MethodGet, f.url+path, nil)
				if upgrade {
					req.Header.Set("Connection", "Upgrade")
					req.Header.Set("Upgrade", "SPDY/3.1")
				}
				resp, err := f.client(&cert).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				wantStatus(t, resp, body, http.StatusUnauthorized, "cannot be passed on exactly")
				if got := f.upstream.take(); len(got) != 0 {
					t.Fatalf("a refused identity reached the upstream: %+v", got)
				}
			})
		}
	}
}

// Only streaming requests take the upgrade path. A write that asks for an
// upgrade is served as the plain write it is: the upstream sees no Upgrade
// header and the caller gets the upstream's real answer, not a 502.
func TestChainUpgradesOnlyStreamingRequests(t *testing.T) {
	f := startChain(t)
	alice := f.ca.clientCert(t, "alice", "devs")
	cases := []struct {
		name, method, path string
		wantCode           int
		wantUpgrade        bool
	}{
		{"exec", http.MethodPost, "/api/v1/namespaces/ns/pods/p/exec", http.StatusSwitchingProtocols, true},
		{"attach", http.MethodGet, "/api/v1/namespaces/ns/pods/p/attach", http.StatusSwitchingProtocols, true},
		{"portforward", http.MethodGet, "/api/v1/namespaces/ns/pods/p/portforward", http.StatusSwitchingProtocols, true},
		{"service proxy", http.MethodGet, "/api/v1/namespaces/ns/services/s/proxy/ws", http.StatusSwitchingProtocols, true},
		{"websocket watch", http.MethodGet, "/api/v1/namespaces/ns/pods?watch=true", http.StatusSwitchingProtocols, true},
		{"binding", http.MethodPost, "/api/v1/namespaces/ns/pods/p/binding", http.StatusOK, false},
		{"create", http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/x/status", http.StatusOK, false},
		{"get", http.MethodGet, "/api/v1/namespaces/ns/pods/p/log", http.StatusOK, false},
		{"non-resource", http.MethodGet, "/version", http.StatusOK, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.upstream.take()
			req, _ := http.NewRequest(tc.method, f.url+tc.path, strings.NewReader("{}"))
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "SPDY/3.1")
			resp, err := f.client(&alice).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("code %d, want %d", resp.StatusCode, tc.wantCode)
			}
			got := f.upstream.take()
			if len(got) != 1 {
				t.Fatalf("upstream saw %d requests, want 1", len(got))
			}
			if hasUpgrade := got[0].header.Get("Upgrade") != ""; hasUpgrade != tc.wantUpgrade {
				t.Fatalf("upstream saw Upgrade %q, want an upgrade: %v", got[0].header.Get("Upgrade"), tc.wantUpgrade)
			}
		})
	}
}

// Beyond the limit, mutating requests get 429 with Retry-After; reads and
// streams are not counted.
func TestChainLimitsMutatingRequestsInFlight(t *testing.T) {
	f := startChain(t, func(o *Options) { o.MaxMutatingRequestsInFlight = 1 })
	alice := f.ca.clientCert(t, "alice", "devs")
	client := f.client(&alice)
	do := func(method, path string) (*http.Response, []byte) {
		req, _ := http.NewRequest(method, f.url+path, strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, body
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, body := do(http.MethodPost, "/api/v1/namespaces/ns/pods/slow/binding") // held by the upstream
		if resp != nil {
			t.Logf("slow: %d %s", resp.StatusCode, body)
		}
	}()
	// Wait until the held request is at the upstream, holding the slot.
	deadline := time.Now().Add(20 * time.Second)
	for held := false; !held; {
		for _, r := range f.upstream.take() {
			held = held || strings.HasPrefix(r.path, "/api/v1/namespaces/ns/pods/slow/")
		}
		if time.Now().After(deadline) {
			t.Fatal("the held request never reached the upstream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, body := do(http.MethodPost, "/api/v1/namespaces/ns/pods/other/binding")
	if resp != nil {
		wantStatus(t, resp, body, http.StatusTooManyRequests, "--max-mutating-requests-inflight")
		if resp.Header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q, want 1", resp.Header.Get("Retry-After"))
		}
	}
	if resp, body := do(http.MethodGet, "/api/v1/namespaces/ns/pods/other"); resp != nil && resp.StatusCode != http.StatusOK {
		t.Errorf("a read was throttled: %d %s", resp.StatusCode, body)
	}
	close(f.upstream.release)
	wg.Wait()
}

// Request metrics carry the verb and resource kube-apiserver would see.
func TestChainMetricsCarryVerbAndResource(t *testing.T) {
	f := startChain(t)
	alice := f.ca.clientCert(t, "alice", "devs")
	req, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/ns/pods", nil)
	resp, err := f.client(&alice).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The counter is written when the handler returns, which may be just
	// after the client has its answer.
	want := `kausality_proxy_requests_total{code="200",resource="pods",verb="list"}`
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err = http.Get(f.metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), want) {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("metrics lack %s:\n%s", want, grepLines(string(body), "kausality_proxy_requests_total"))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func wantStatus(t *testing.T, resp *http.Response, body []byte, code int, msgPart string) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("code %d, want %d: %s", resp.StatusCode, code, body)
	}
	var s metav1.Status
	if err := json.Unmarshal(body, &s); err != nil || s.Kind != "Status" || int(s.Code) != code {
		t.Fatalf("not a %d Status (%v): %s", code, err, body)
	}
	if !strings.Contains(s.Message, msgPart) {
		t.Fatalf("message %q does not mention %q", s.Message, msgPart)
	}
}
