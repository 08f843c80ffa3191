package intercept_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A controller's drift by patch is confirmed with a dry run on the stored
// child. The proxy keeps kube-apiserver's answer to the first such write;
// the next patch of that version is dry-run pinned to it (the proxy adds
// the resourceVersion, which kube-apiserver takes as a precondition), so
// the copy stands for the live read. When kube-apiserver refuses the pin
// (the copy is older than what it stores), the caller, who named no
// version, never hears of it: the write is confirmed again on a live read
// and goes through.
func TestDriftPatchIsConfirmedOnTheCopyPinnedToIt(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	cases := []struct {
		name string
		// copyIsStale: kube-apiserver stores a newer version than the copy.
		copyIsStale bool
		// wantForwarded: the dry runs and the writes of both patches.
		wantForwarded int64
		// wantLiveChildReads: the proxy's live GETs of the child.
		wantLiveChildReads int
	}{
		{name: "the copy is the stored version: no live read", wantForwarded: 4, wantLiveChildReads: 1},
		{name: "the copy is older: the pinned dry run is refused, and the write is confirmed on a live read", copyIsStale: true,
			wantForwarded: 5, wantLiveChildReads: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, replicaSetsAsChildren)
			var pinnedDryRuns int
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				var p struct {
					Metadata struct {
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
					Spec struct {
						MinReadySeconds int64 `json:"minReadySeconds"`
					} `json:"spec"`
				}
				data, _ := io.ReadAll(r.Body)
				if err := json.Unmarshal(data, &p); err != nil {
					t.Errorf("the forwarded patch %s: %v", data, err)
				}
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Query().Get("dryRun") != "" && p.Metadata.ResourceVersion != "" {
					pinnedDryRuns++
					if tc.copyIsStale {
						w.WriteHeader(http.StatusConflict)
						_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`))
						return
					}
				}
				// The stored child is never changed by the fake: every
				// answer is of the cached version.
				child := benchChild("stable-1", "stable", "stable-uid", 1)
				if err := unstructured.SetNestedField(child.Object, p.Spec.MinReadySeconds, "spec", "minReadySeconds"); err != nil {
					t.Fatal(err)
				}
				out, _ := child.MarshalJSON()
				_, _ = w.Write(out)
			}
			env.dyn.ClearActions()
			for _, value := range []string{"7", "8"} {
				w := benchWrite{name: "drift patch", method: http.MethodPatch, path: "/apis/apps/v1/namespaces/apps/replicasets/stable-1",
					contentType: "application/merge-patch+json", body: []byte(`{"spec":{"minReadySeconds":` + value + `}}`),
					user: "system:serviceaccount:kube-system:deployment-controller"}
				rec := httptest.NewRecorder()
				env.handler.ServeHTTP(rec, env.request(t, w))
				if rec.Code != http.StatusOK {
					t.Fatalf("patch to %s: code %d, want 200 (error: %v)", value, rec.Code, env.lastError)
				}
			}
			if pinnedDryRuns != 1 {
				t.Errorf("%d dry runs pinned to the copy, want 1", pinnedDryRuns)
			}
			if got := env.forwarded.Load(); got != tc.wantForwarded {
				t.Errorf("forwarded %d requests, want %d", got, tc.wantForwarded)
			}
			if reads := env.liveReads("replicasets"); reads != tc.wantLiveChildReads {
				t.Errorf("%d live reads of the child, want %d", reads, tc.wantLiveChildReads)
			}
		})
	}
}
