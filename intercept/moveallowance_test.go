package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
)

// The deployment controller changes a ReplicaSet's image under its
// reconciling parent "web", whose allowances (enforce) allow only
// spec.replicas: refused. The same write that also moves the ReplicaSet
// there from the settled parent "stable" (log mode, the default) passes:
// UnderBoth relabels the decision as the former parent's DriftUnapproved
// before DecideAllowances, which gives that category no allowance check.
func TestMovingAChildAwayFromALogModeParentKeepsTheAllowancesOfTheParentItJoins(t *testing.T) {
	policy := allowance.CompileSpec("deployment-replicas", "uid-1", 1, v1alpha1.AllowancePolicySpec{
		Match: v1alpha1.AllowanceMatch{Kind: "Deployment", Fields: []string{"spec.replicas"}},
		Subjects: []v1alpha1.AllowanceSubject{
			{Kind: v1alpha1.SubjectUser, Name: "alice", MayInitiate: true},
			{Kind: v1alpha1.SubjectServiceAccount, Namespace: "kube-system", Name: "deployment-controller"},
		},
		Allow: []v1alpha1.AllowedMutation{{Kind: "ReplicaSet", Relation: v1alpha1.RelationChild, Mutations: []string{"spec.replicas"}}},
	})
	if !policy.Valid() {
		t.Fatal("policy invalid")
	}
	granted := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":6,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":6,"field":"spec.replicas"}]}]`
	withGrant := func(s *serveSetup) {
		s.config.AllowancePolicies = fixedAllowances{policy}
		for _, o := range s.objects {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "Deployment" && u.GetName() == "web" {
				a := u.GetAnnotations()
				a[allowance.Annotation] = granted
				u.SetAnnotations(a)
			}
		}
	}
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name  string
		child string
	}{{"control: a child of web", "web-1"}, {"moved from stable to web", "stable-1"}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, withGrant, withNamespaceAllowanceMode("enforce"))
			c := benchChild(tc.child, "web", "web-uid", 1) // owned by web after the write
			cs, _, _ := unstructured.NestedSlice(c.Object, "spec", "template", "spec", "containers")
			cs[0].(map[string]interface{})["image"] = "evil:1"
			_ = unstructured.SetNestedSlice(c.Object, cs, "spec", "template", "spec", "containers")
			data, _ := c.MarshalJSON()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut,
				path: "/apis/apps/v1/namespaces/apps/replicasets/" + tc.child, contentType: "application/json", body: data, user: kcmUser}))
			if rec.Code != http.StatusForbidden {
				t.Fatalf("code %d, want 403: the image change violates web's enforce-mode allowances (forwarded %d, error %v)", rec.Code, env.forwarded.Load(), env.lastError)
			}
		})
	}
}
