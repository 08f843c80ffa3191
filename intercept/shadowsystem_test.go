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

// The stored values a shadow write gets put back come from the proxy's
// copy, which may lag behind what the proxy itself wrote meanwhile: they
// land only on the version they were read from. A conflict for that
// precondition is the proxy's own, answered by reading the object live and
// sending again; a shadow write is never made to fail, so after
// decision.MaxRounds-1 of them it goes without the precondition.
func TestAShadowWriteKeepsSystemAnnotationsOnTheStoredVersion(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: onboarding\n  match:\n    user: alice\n  mode: shadow\n"))
	if err != nil {
		t.Fatal(err)
	}
	const rewritesUpdaters = `{"metadata":{"annotations":{"kausality.io/updaters":"zzzzz"}}}`
	cases := []struct {
		name, body string
		// conflicts: how many writes kube-apiserver answers 409 first.
		conflicts     int
		wantCode      int
		wantVersions  []string
		wantLiveReads int
	}{
		{name: "pinned to the version the values come from", body: rewritesUpdaters,
			wantCode: http.StatusOK, wantVersions: []string{"200"}},
		{name: "a copy that lagged behind: read live and sent again, the client hears nothing of it", body: rewritesUpdaters,
			conflicts: 1, wantCode: http.StatusOK, wantVersions: []string{"200", "200"}, wantLiveReads: 1},
		{name: "still moving: the last round goes without the precondition", body: rewritesUpdaters,
			conflicts: 2, wantCode: http.StatusOK, wantVersions: []string{"200", "200", ""}, wantLiveReads: 2},
		{name: "the caller's own version stands, and so does its conflict",
			body:      `{"metadata":{"resourceVersion":"200","annotations":{"kausality.io/updaters":"zzzzz"}}}`,
			conflicts: 1, wantCode: http.StatusConflict, wantVersions: []string{"200"}},
		{name: "a version the cache has not seen: the values put back are read live",
			body:     `{"metadata":{"resourceVersion":"201","annotations":{"kausality.io/updaters":"zzzzz"}}}`,
			wantCode: http.StatusOK, wantVersions: []string{"201"}, wantLiveReads: 1},
		{name: "a patch of other annotations is not pinned", body: `{"metadata":{"annotations":{"team":"a"}}}`,
			wantCode: http.StatusOK, wantVersions: []string{""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []map[string]any
			)
			env := newServeEnv(t, nil, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil },
				withUpdatersOnStable, func(s *serveSetup) { s.config.Settings = func() *config.Config { return cfg } })
			env.dyn.ClearActions()
			env.upstream = conflictingUpstream(t, tc.conflicts, &mu, &sent)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/stable-1?fieldManager=onboarding",
				contentType: "application/merge-patch+json", body: []byte(tc.body), user: "alice"}))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s (error %v)", rec.Code, tc.wantCode, rec.Body, env.lastError)
			}
			if reads := env.liveReads("replicasets"); reads != tc.wantLiveReads {
				t.Errorf("%d live reads of the ReplicaSet, want %d", reads, tc.wantLiveReads)
			}
			expectForwardedOn(t, sent, tc.wantVersions, "aaaaa")
		})
	}
}
