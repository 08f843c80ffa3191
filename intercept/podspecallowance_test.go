package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
)

// A ReplicaSet governed by an allowance policy (enforce) whose controller
// may change only its pods' images. The controller's change of a pod's
// container resources is a violation whatever form it takes: the pod's
// resize subresource changes exactly that. It is decided on a new object
// that is a copy of the stored one, so the allowance check sees no
// changed path at all and lets it pass.
func TestAResizeIsCheckedAgainstTheParentsAllowances(t *testing.T) {
	policy := allowance.CompileSpec("rs-images", "uid-1", 1, v1alpha1.AllowancePolicySpec{
		Match: v1alpha1.AllowanceMatch{Group: ptrString("apps"), Kind: "ReplicaSet", Fields: []string{"spec.replicas"}},
		Subjects: []v1alpha1.AllowanceSubject{
			{Kind: v1alpha1.SubjectUser, Name: "alice", MayInitiate: true},
			{Kind: v1alpha1.SubjectServiceAccount, Namespace: "kube-system", Name: "replicaset-controller"},
		},
		Allow: []v1alpha1.AllowedMutation{{Kind: "Pod", Relation: v1alpha1.RelationChild, Mutations: []string{"spec.containers[*].image"}}},
	})
	if !policy.Valid() {
		t.Fatal("policy invalid")
	}
	withPolicy := func(s *serveSetup) { s.config.AllowancePolicies = fixedAllowances{policy} }
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	rsController := "system:serviceaccount:kube-system:replicaset-controller"
	for _, tc := range []struct{ name, path, body string }{
		{"control: a patch of the pod's resources", "free-pod",
			`{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"64"},"requests":{"cpu":"64"}}}]}}`},
		{"a resize", "free-pod/resize",
			`{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"64"},"requests":{"cpu":"64"}}}]}}`},
		{"an ephemeral container", "free-pod/ephemeralcontainers",
			`{"spec":{"ephemeralContainers":[{"name":"debug","image":"evil:1"}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowAll, withPods, withPolicy, withNamespaceAllowanceMode("enforce"))
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: "/api/v1/namespaces/apps/pods/" + tc.path,
				contentType: "application/strategic-merge-patch+json", body: []byte(tc.body), user: rsController}))
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != http.StatusForbidden || len(sent) != 0 {
				t.Fatalf("code %d with %d forwarded, want 403: the change violates the ReplicaSet's enforce-mode allowances (%v)", rec.Code, len(sent), env.lastError)
			}
		})
	}
}

func ptrString(s string) *string { return &s }
