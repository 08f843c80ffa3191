package decision

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// An operator that rebuilds its child's spec from scratch
// (existing.Spec = desired.Spec; Update) sends a PUT, bound to the stored
// resourceVersion, that omits fields kube-apiserver defaults
// (the template's restartPolicy here; dnsPolicy, schedulerName,
// terminationMessagePath... in a real template). kube-apiserver stores
// them unchanged. As a drift verdict, the violations such a write seems to
// make are confirmed on kube-apiserver's dry-run result before they
// stand.
func TestOmittedDefaultsAreNoAllowanceViolations(t *testing.T) {
	enforce := map[string]string{annotations.AllowanceMode: "enforce"}
	granted := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":2,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":2,"field":"spec.replicas"}]}]`
	parent := allowanceObject("Deployment", 2, 4, "app:1", map[string]string{annotations.Allowances: granted})
	stored := allowanceObject("ReplicaSet", 1, 2, "app:1", nil)
	_ = unstructured.SetNestedField(stored.Object, "Always", "spec", "template", "spec", "restartPolicy") // defaulted by kube-apiserver
	stored.SetResourceVersion("7")
	sent := allowanceObject("ReplicaSet", 1, 4, "app:1", nil) // replicas 2 -> 4, the default omitted
	sent.SetResourceVersion("7")
	in := Input{Operation: Update, DesiredChanged: true, User: &user.DefaultInfo{Name: testController}, Parent: parent,
		Settle: &settle.Facts{SettledAt: 1}, Child: ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1"},
		OldObject: stored, NewObject: sent, NoChangeIsCertain: true}
	got := DecideAllowances(context.Background(), Decision{Result: Allow, Category: Expected}, in,
		AllowanceInputs{Policies: allowanceTestPolicies(), NamespaceAnnotations: enforce})
	if got.Result == Deny && !got.ConfirmWithServer {
		var v []string
		for _, x := range got.Allowances.Violations {
			v = append(v, x.Mutation)
		}
		t.Errorf("refused for %v without asking kube-apiserver what it stores; the write changes only spec.replicas, which is allowed", v)
	}

	// The same write that also changes the image, which nothing allows:
	// refused on its own body, which never goes upstream, not even as a
	// dry run.
	evil := allowanceObject("ReplicaSet", 1, 4, "evil:1", nil)
	evil.SetResourceVersion("7")
	in.NewObject = evil
	got = DecideAllowances(context.Background(), Decision{Result: Allow, Category: Expected}, in,
		AllowanceInputs{Policies: allowanceTestPolicies(), NamespaceAnnotations: enforce})
	if got.Result != Deny || got.ConfirmWithServer {
		t.Errorf("a write that leaves out a default and changes the image: %s, confirm with the server %v; want Deny on the write itself", got.Result, got.ConfirmWithServer)
	}
}
