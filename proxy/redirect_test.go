package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An upstream redirect is never followed or passed on, on the plain path
// and on the upgrade path alike: the caller gets a 502 Status without a
// Location, and the upstream sees the one request the caller made.
func TestChainRejectsUpstreamRedirectsOnEveryPath(t *testing.T) {
	f := startChain(t)
	alice := f.ca.clientCert(t, "alice", "devs")
	cases := []struct {
		name, method, path string
		upgrade            bool
	}{
		{"exec upgrade", http.MethodPost, "/api/v1/namespaces/ns/pods/redirect/exec", true},
		{"port-forward upgrade", http.MethodGet, "/api/v1/namespaces/ns/pods/redirect/portforward", true},
		{"exec without an upgrade", http.MethodPost, "/api/v1/namespaces/ns/pods/redirect/exec", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.upstream.take()
			req, _ := http.NewRequest(tc.method, f.url+tc.path, nil)
			if tc.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "SPDY/3.1")
			}
			resp, err := f.client(&alice).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Location") != "" {
				t.Fatalf("got %d (Location %q): %s", resp.StatusCode, resp.Header.Get("Location"), body)
			}
			var s metav1.Status
			if err := json.Unmarshal(body, &s); err != nil || s.Code != http.StatusBadGateway {
				t.Fatalf("not a 502 Status: %s", body)
			}
			if !tc.upgrade && !strings.Contains(s.Message, "redirect") {
				t.Errorf("the message does not say the upstream redirected: %s", s.Message)
			}
			if got := f.upstream.take(); len(got) != 1 || got[0].path != tc.path {
				t.Fatalf("the upstream saw %d requests, want only the caller's one: %+v", len(got), got)
			}
		})
	}
}
