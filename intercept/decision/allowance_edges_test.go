package decision

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// The only Deployment policy turning invalid (a CEL condition that no
// longer compiles after an edit, a typo in a path) must not turn a
// violation that enforce mode refuses into an allowed write: the kind
// stays governed, and the invalid policy grants nothing.
func TestAnInvalidPolicyDoesNotTurnTheCheckOff(t *testing.T) {
	enforce := map[string]string{annotations.AllowanceMode: "enforce"}
	granted := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":2,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":2,"field":"spec.replicas"}]}]`
	parent := allowanceObject("Deployment", 2, 4, "app:1", map[string]string{annotations.Allowances: granted})
	ctrl := &user.DefaultInfo{Name: testController}
	in := Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: &settle.Facts{SettledAt: 1},
		Child:     ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1"},
		OldObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "evil:1", nil)}
	d := Decision{Result: Allow, Category: Expected}

	valid := allowanceTestPolicies()
	if got := DecideAllowances(context.Background(), d, in, AllowanceInputs{Policies: valid, NamespaceAnnotations: enforce}); got.Result != Deny {
		t.Fatalf("control: with the valid policy the template change is %s, want Deny", got.Result)
	}
	broken := []*allowance.Compiled{allowance.CompileSpec("deployment-replicas", "uid-1", 2, v1alpha1.AllowancePolicySpec{
		Match: v1alpha1.AllowanceMatch{Kind: "Deployment", Fields: []string{"spec.replicas"}, CEL: []string{"object.spec.replicas >"}},
		Subjects: []v1alpha1.AllowanceSubject{
			{Kind: v1alpha1.SubjectUser, Name: "alice", MayInitiate: true},
			{Kind: v1alpha1.SubjectServiceAccount, Namespace: "kube-system", Name: "deployment-controller"},
		},
		Allow: []v1alpha1.AllowedMutation{{Kind: "ReplicaSet", Relation: v1alpha1.RelationChild, Mutations: []string{"spec.replicas"}}},
	})}
	if broken[0].Valid() {
		t.Fatal("the broken policy compiled")
	}
	for name, policies := range map[string][]*allowance.Compiled{"the policy is invalid": broken} {
		got := DecideAllowances(context.Background(), d, in, AllowanceInputs{Policies: policies, NamespaceAnnotations: enforce})
		if got.Result != Deny {
			t.Errorf("%s: the controller's image change nothing allows is %s (allowances checked: %v), want Deny in allowance-mode enforce",
				name, got.Result, got.Allowances != nil)
		}
	}
}
