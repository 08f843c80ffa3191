package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// A pod's resize and ephemeralcontainers subresources change its spec
// (container resources, ephemeral containers), and kube-apiserver keeps
// the rest of the stored pod, metadata included. So they are decided as
// changes of the pod: a frozen parent's pod is not resized. What is
// allowed goes upstream as it came.
func TestPodSpecSubresourceWrites(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	resize := `{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"4"},"requests":{"cpu":"4"}}}]}}`
	ephemeral := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"held-pod","namespace":"apps","resourceVersion":"300"},` +
		`"spec":{"containers":[{"name":"app","image":"registry.k8s.io/pause:3.10"}],"ephemeralContainers":[{"name":"debug","image":"busybox"}]}}`
	person := "bob"
	rsController := "system:serviceaccount:kube-system:replicaset-controller"
	tests := []struct {
		name, method, path, contentType, body, user string
		wantCode                                    int
		wantForwarded                               int
	}{
		{"a person resizes a frozen ReplicaSet's pod", http.MethodPatch, "held-pod/resize", "application/strategic-merge-patch+json", resize, person,
			http.StatusForbidden, 0},
		{"the same as a dry run", http.MethodPatch, "held-pod/resize?dryRun=All", "application/strategic-merge-patch+json", resize, person,
			http.StatusForbidden, 0},
		{"a person adds an ephemeral container to a frozen ReplicaSet's pod", http.MethodPut, "held-pod/ephemeralcontainers", "application/json",
			ephemeral, person, http.StatusForbidden, 0},
		{"a person resizes a pod of a ReplicaSet that is not frozen: a new origin", http.MethodPatch, "free-pod/resize",
			"application/strategic-merge-patch+json", resize, person, http.StatusOK, 1},
		{"its ReplicaSet's controller resizes it: a pod is an ungated kind", http.MethodPatch, "free-pod/resize",
			"application/merge-patch+json", resize, rsController, http.StatusOK, 1},
		{"a pod that does not exist", http.MethodPatch, "gone-pod/resize", "application/merge-patch+json", resize, person,
			http.StatusNotFound, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowAll, enforce, withPods)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			r := env.request(t, benchWrite{method: tt.method, path: "/api/v1/namespaces/apps/pods/" + tt.path,
				contentType: tt.contentType, body: []byte(tt.body), user: tt.user})
			r.Header.Set("User-Agent", kubectlUA)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != tt.wantCode || len(sent) != tt.wantForwarded {
				t.Fatalf("code %d with %d forwarded, want %d with %d: %s (%v)", rec.Code, len(sent), tt.wantCode, tt.wantForwarded, rec.Body, env.lastError)
			}
			if tt.wantCode == http.StatusForbidden && (env.lastError == nil || !strings.Contains(env.lastError.Error(), "frozen")) {
				t.Errorf("the denial does not say the parent is frozen: %v", env.lastError)
			}
			for _, s := range sent {
				if s.body != tt.body {
					t.Errorf("forwarded %s, want the body as it came: %s", s.body, tt.body)
				}
			}
		})
	}
}
