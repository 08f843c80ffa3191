package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/kausality-io/kausality-proxy/intercept/config"
)

// A controller in shadow mode writes what only the proxy writes (the
// allowances other controllers' writes are decided by, the record of a
// parent's controllers): its write goes upstream without those changes,
// as any other write's would; the rest of it as it came, never denied.
func TestAShadowWriteKeepsTheSystemAnnotationsAsStored(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: onboarding\n  match:\n    user: alice\n  mode: shadow\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, body, kept string
	}{
		{"allowances on a ReplicaSet", "/apis/apps/v1/namespaces/apps/replicasets/stable-1",
			`{"metadata":{"annotations":{"kausal.io/allowances":"[{\"forged\":true}]","example.com/x":"y"}}}`, "example.com/x"},
		{"the record of a Deployment's controllers", "/apis/apps/v1/namespaces/apps/deployments/stable",
			`{"metadata":{"annotations":{"kausality.io/controllers":"zzzzz","example.com/x":"y"}},"spec":{"replicas":9}}`, `"replicas":9`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil },
				enforce, func(s *serveSetup) { s.config.Settings = func() *config.Config { return cfg } })
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: tc.path + "?fieldManager=onboarding",
				contentType: "application/merge-patch+json", body: []byte(tc.body), user: "alice"}))
			if rec.Code != http.StatusOK || len(sent) != 1 {
				t.Fatalf("code %d, %d forwarded (error %v)", rec.Code, len(sent), env.lastError)
			}
			body := string(sent[0].body)
			for _, forged := range []string{"forged", "zzzzz"} {
				if strings.Contains(body, forged) {
					t.Errorf("a system annotation written in shadow mode went upstream: %s", body)
				}
			}
			if !strings.Contains(body, tc.kept) {
				t.Errorf("the rest of the shadow write was changed: %s", body)
			}
		})
	}
}
