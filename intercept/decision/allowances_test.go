package decision

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

const testController = "system:serviceaccount:kube-system:deployment-controller"

func allowanceTestPolicies() []*allowance.Compiled {
	return []*allowance.Compiled{allowance.CompileSpec("deployment-replicas", "uid-1", 1, v1alpha1.AllowancePolicySpec{
		Match: v1alpha1.AllowanceMatch{Kind: "Deployment", Fields: []string{"spec.replicas"}},
		Subjects: []v1alpha1.AllowanceSubject{
			{Kind: v1alpha1.SubjectUser, Name: "alice", MayInitiate: true},
			{Kind: v1alpha1.SubjectServiceAccount, Namespace: "kube-system", Name: "deployment-controller"},
		},
		Allow: []v1alpha1.AllowedMutation{{Kind: "ReplicaSet", Relation: v1alpha1.RelationChild, Mutations: []string{"spec.replicas"}}},
	})}
}

func allowanceObject(kind string, generation int64, replicas int64, image string, ann map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": kind,
		"metadata": map[string]any{"name": "web", "namespace": "ns", "generation": generation},
		"spec": map[string]any{"replicas": replicas, "template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "app", "image": image}}}}}}}
	if ann != nil {
		u.SetAnnotations(ann)
	}
	return u
}

func TestDecideAllowances(t *testing.T) {
	enforce := map[string]string{annotations.AllowanceMode: "enforce"}
	granted := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":2,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":2,"field":"spec.replicas"}]}]`
	parent := allowanceObject("Deployment", 2, 4, "app:1", map[string]string{annotations.Allowances: granted})
	alice := &user.DefaultInfo{Name: "alice"}
	ctrl := &user.DefaultInfo{Name: testController}
	unsettled := &settle.Facts{SettledAt: 1}

	for _, tc := range []struct {
		name      string
		d         Decision
		in        Input
		ns        map[string]string
		wantDeny  bool
		wantWarn  string
		wantSet   string // substring of the forwarded kausal.io/allowances
		wantCause string
		// wantReport: a DriftReport is sent for the write.
		wantReport bool
	}{{
		name: "a person's scale grants the ReplicaSet replicas",
		d:    Decision{Result: Allow, Category: NoParent},
		in: Input{Operation: Update, DesiredChanged: true, User: alice,
			OldObject: allowanceObject("Deployment", 1, 2, "app:1", nil), NewObject: allowanceObject("Deployment", 1, 4, "app:1", nil)},
		ns:      enforce,
		wantSet: `"mutation":"spec.replicas","generation":2,"initiator":"alice"`,
	}, {
		name: "mode off: a person's scale grants nothing",
		d:    Decision{Result: Allow, Category: NoParent},
		in: Input{Operation: Update, DesiredChanged: true, User: alice,
			OldObject: allowanceObject("Deployment", 1, 2, "app:1", nil), NewObject: allowanceObject("Deployment", 1, 4, "app:1", nil)},
	}, {
		name: "the controller scales the ReplicaSet: allowed",
		d:    Decision{Result: Allow, Category: Expected},
		in: Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: unsettled, Child: ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
			OldObject: allowanceObject("ReplicaSet", 1, 2, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil)},
		ns: enforce,
	}, {
		name: "the controller changes the template in the scale window: denied in enforce",
		d:    Decision{Result: Allow, Category: Expected},
		in: Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: unsettled, Child: ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
			OldObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "evil:1", nil)},
		ns:         enforce,
		wantDeny:   true,
		wantCause:  "spec.template.spec.containers[0].image",
		wantReport: true,
	}, {
		name: "the same in log mode: allowed with a warning",
		d:    Decision{Result: Allow, Category: Expected},
		in: Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: unsettled, Child: ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
			OldObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "evil:1", nil)},
		ns:         map[string]string{annotations.AllowanceMode: "log"},
		wantWarn:   "spec.template.spec.containers[0].image",
		wantReport: true,
	}, {
		name: "the same in log mode while snoozed: allowed with a warning, not reported",
		d:    Decision{Result: Allow, Category: Expected, Snooze: SnoozeState{Snoozed: true}},
		in: Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: unsettled, Child: ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
			OldObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "evil:1", nil)},
		ns:       map[string]string{annotations.AllowanceMode: "log"},
		wantWarn: "spec.template.spec.containers[0].image",
	}, {
		name: "the same in shadow mode: allowed untouched",
		d:    Decision{Result: Allow, Category: Expected},
		in: Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: unsettled, Child: ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
			OldObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "evil:1", nil)},
		ns: map[string]string{annotations.AllowanceMode: "shadow"},
	}, {
		name: "the parent settled at the allowance's generation: consumed, denied",
		d:    Decision{Result: Allow, Category: Expected},
		in: Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: &settle.Facts{SettledAt: 2}, Child: ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
			OldObject: allowanceObject("ReplicaSet", 1, 2, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil)},
		ns:         enforce,
		wantDeny:   true,
		wantCause:  "spec.replicas",
		wantReport: true,
	}, {
		name: "a drift denial stays a denial, unexplained by allowances",
		d:    Decision{Result: Deny, Category: DriftUnapproved},
		in: Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: unsettled, Child: ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
			OldObject: allowanceObject("ReplicaSet", 1, 2, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil)},
		ns:       enforce,
		wantDeny: true,
	}, {
		name: "a parent kind no policy speaks of is not checked",
		d:    Decision{Result: Allow, Category: Expected},
		in: Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: allowanceObject("StatefulSet", 2, 4, "app:1", nil), Settle: unsettled,
			Child:     ObjectRef{Kind: "Pod", Name: "web-0"},
			OldObject: allowanceObject("Pod", 1, 4, "app:1", nil), NewObject: allowanceObject("Pod", 1, 4, "evil:1", nil)},
		ns: enforce,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideAllowances(context.Background(), tc.d, tc.in, AllowanceInputs{Policies: allowanceTestPolicies(), NamespaceAnnotations: tc.ns})
			if (got.Result == Deny) != tc.wantDeny {
				t.Fatalf("result %s (%s), want deny=%v", got.Result, got.Message, tc.wantDeny)
			}
			if tc.wantCause != "" {
				found := false
				for _, c := range got.Causes {
					found = found || c.Type == CauseAllowance && c.Field == tc.wantCause
				}
				if !found || !strings.Contains(got.Message, annotations.Allowances) {
					t.Errorf("the denial names no allowance for %s: %s %+v", tc.wantCause, got.Message, got.Causes)
				}
			}
			if (got.Report == ReportDetected) != tc.wantReport && tc.d.Result != Deny {
				t.Errorf("report %q, want a Detected report: %v", got.Report, tc.wantReport)
			}
			if tc.wantWarn != "" && !strings.Contains(strings.Join(got.Warnings, "\n"), tc.wantWarn) {
				t.Errorf("no warning about %s: %q", tc.wantWarn, got.Warnings)
			}
			if tc.wantWarn == "" && len(got.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", got.Warnings)
			}
			var set string
			if got.ChildAnnotations != nil {
				set = got.ChildAnnotations.Set[annotations.Allowances]
			}
			if tc.wantSet == "" && set != "" || !strings.Contains(set, tc.wantSet) {
				t.Errorf("forwarded allowances %q, want them to contain %q", set, tc.wantSet)
			}
			if tc.ns == nil && got.Allowances != nil {
				t.Errorf("allowances applied with the mode off: %+v", got.Allowances)
			}
		})
	}
}

// TestDecideAllowancesConfirmsAnOldCopy: a violation of a PUT naming a
// resourceVersion other than the stored object's is confirmed with the
// server (kube-apiserver refuses an old copy with a conflict); a violation
// of a current copy that changes a field, or one already confirmed,
// stands, and the write's body never goes upstream. A server-side apply
// of a kind whose schema the proxy lacks (a custom resource) is merged
// with a deduced schema, which may keep list entries or keys
// kube-apiserver removes: its verdict, allowed or not, is confirmed.
func TestDecideAllowancesConfirmsAnOldCopy(t *testing.T) {
	granted := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":2,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":2,"field":"spec.replicas"}]}]`
	parent := allowanceObject("Deployment", 2, 4, "app:1", map[string]string{annotations.Allowances: granted})
	ctrl := &user.DefaultInfo{Name: testController}
	write := func(image string, stale, confirmed bool) Input {
		return Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: &settle.Facts{SettledAt: 1},
			Child:       ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
			OldObject:   allowanceObject("ReplicaSet", 1, 2, "edited:1", nil),
			NewObject:   allowanceObject("ReplicaSet", 1, 4, image, nil),
			StaleUpdate: stale, Confirmed: confirmed}
	}
	applied := func(image string, confirmed bool) Input {
		in := write(image, false, confirmed)
		in.ApplyWithoutSchema = true
		return in
	}
	for _, tc := range []struct {
		name        string
		in          Input
		wantConfirm bool
	}{
		{"an old copy reverting the template: confirmed with the server", write("app:1", true, false), true},
		{"the same copy confirmed already: the violation stands", write("app:1", true, true), false},
		{"a current copy reverting the template: the violation stands", write("app:1", false, false), false},
		{"an old copy the allowances cover: nothing to confirm", write("edited:1", true, false), false},
		{"an apply merged without schema, allowed: confirmed with the server", applied("edited:1", false), true},
		{"an apply merged without schema, a violation: confirmed with the server", applied("app:1", false), true},
		{"an apply merged without schema, confirmed already", applied("edited:1", true), false},
		{"the allowed write merged with the kind's schema: nothing to confirm", write("edited:1", false, false), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideAllowances(context.Background(), Decision{Result: Allow, Category: Expected}, tc.in,
				AllowanceInputs{Policies: allowanceTestPolicies(), NamespaceAnnotations: map[string]string{annotations.AllowanceMode: "enforce"}})
			if got.ConfirmWithServer != tc.wantConfirm {
				t.Fatalf("ConfirmWithServer %v, want %v (%s %s)", got.ConfirmWithServer, tc.wantConfirm, got.Result, got.Message)
			}
			if tc.wantConfirm {
				if n := Needs(&got, Held{Confirmable: true, MainResource: true, ChildLive: true, Operation: Update}); !n.ServerResult {
					t.Errorf("the write path is not asked for the server's result: %+v", n)
				}
			}
		})
	}
}

// TestParentGroup: the parent's group comes from its snapshot, or from
// the child's controller reference when the snapshot does not say.
func TestParentGroup(t *testing.T) {
	parent := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "web", "uid": "p-1"}}}
	child := allowanceObject("ReplicaSet", 1, 1, "app:1", nil)
	child.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Deployment", Name: "web", UID: "p-1", Controller: ptr.To(true)}})
	for _, tc := range []struct {
		name       string
		apiVersion string
		want       string
	}{
		{"from the snapshot", "apps/v1", "apps"},
		{"the core group", "v1", ""},
		{"from the controller reference", "", "example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := parent.DeepCopy()
			p.SetAPIVersion(tc.apiVersion)
			if got := parentGroup(Input{Parent: p, NewObject: child}); got != tc.want {
				t.Errorf("parentGroup = %q, want %q", got, tc.want)
			}
		})
	}
}

// A CronJob drift gating counts as initializing, settled at its spec: the
// allowances its spec granted are consumed, and its scheduled Job is a
// standing duty, allowed by a policy that lets its controller create Jobs.
func TestDecideAllowancesScheduledChild(t *testing.T) {
	policies := []*allowance.Compiled{allowance.CompileSpec("cronjob-jobs", "uid-2", 1, v1alpha1.AllowancePolicySpec{
		Match: v1alpha1.AllowanceMatch{Kind: "CronJob", Fields: []string{"spec"}},
		Subjects: []v1alpha1.AllowanceSubject{
			{Kind: v1alpha1.SubjectGroup, Name: "system:authenticated", MayInitiate: true},
			{Kind: v1alpha1.SubjectServiceAccount, Namespace: "kube-system", Name: "cronjob-controller"},
		},
		Allow: []v1alpha1.AllowedMutation{{Kind: "Job", Relation: v1alpha1.RelationChild, Mutations: []string{"create"}}},
	})}
	enforce := map[string]string{annotations.AllowanceMode: "enforce"}
	consumed := `[{"kind":"Job","mutation":"create","generation":1,"initiator":"alice","policy":"cronjob-jobs","trace":[{"kind":"CronJob","name":"tick","generation":1,"field":"spec"}]}]`
	cronJob := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "CronJob",
		"metadata": map[string]any{"name": "tick", "namespace": "ns", "generation": int64(1), "annotations": map[string]any{annotations.Allowances: consumed}}}}
	job := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": map[string]any{"name": "tick-1", "namespace": "ns"}}}
	for _, tc := range []struct {
		name     string
		user     string
		settle   *settle.Facts
		wantDeny bool
	}{
		{name: "settled at its spec: the scheduled Job is a standing duty", user: "system:serviceaccount:kube-system:cronjob-controller", settle: &settle.Facts{AtCurrentSpec: true}},
		{name: "settled, but a writer no policy names", user: "system:serviceaccount:kube-system:job-controller", settle: &settle.Facts{AtCurrentSpec: true}, wantDeny: true},
		{name: "never settled: the create needs an allowance, and the stored one names another writer", user: "system:serviceaccount:kube-system:job-controller", wantDeny: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Operation: Create, DesiredChanged: true, User: &user.DefaultInfo{Name: tc.user}, Parent: cronJob, Settle: tc.settle,
				Child: ObjectRef{Kind: "Job", Name: "tick-1"}, NewObject: job}
			got := DecideAllowances(context.Background(), Decision{Result: Allow, Category: ParentInitializing}, in, AllowanceInputs{Policies: policies, NamespaceAnnotations: enforce})
			if (got.Result == Deny) != tc.wantDeny {
				t.Fatalf("result %s (%s), want deny=%v", got.Result, got.Message, tc.wantDeny)
			}
		})
	}
}

// TestDecideAllowancesScaleWrite: a /scale body has no room for
// annotations, so the allowances a /scale grants are written ahead of it,
// naming the generation the /scale produces after that write; the rest of
// the scaled object's annotations (its trace) still follow it.
func TestDecideAllowancesScaleWrite(t *testing.T) {
	enforce := map[string]string{annotations.AllowanceMode: "enforce"}
	alice := &user.DefaultInfo{Name: "alice"}
	rsPolicy := allowance.CompileSpec("replicaset-replicas", "uid-2", 1, v1alpha1.AllowancePolicySpec{
		Match:    v1alpha1.AllowanceMatch{Kind: "ReplicaSet", Group: ptr.To("apps"), Fields: []string{"spec.replicas"}},
		Subjects: []v1alpha1.AllowanceSubject{{Kind: v1alpha1.SubjectUser, Name: "alice", MayInitiate: true}},
		Allow:    []v1alpha1.AllowedMutation{{Kind: "Pod", Relation: v1alpha1.RelationChild, Mutations: []string{"create", "delete"}}},
	})
	policies := append(allowanceTestPolicies(), rsPolicy)
	traced := &AnnotationChanges{Set: map[string]string{annotations.Trace: `[{"user":"alice"}]`}}
	for _, tc := range []struct {
		name           string
		kind           string
		scale          bool
		wantGeneration string
		wantAhead      bool
	}{
		{name: "a Deployment's /scale: its annotation write is a generation of its own", kind: "Deployment", scale: true,
			wantGeneration: `"generation":9`, wantAhead: true},
		{name: "a ReplicaSet's /scale: only spec changes count", kind: "ReplicaSet", scale: true,
			wantGeneration: `"generation":8`, wantAhead: true},
		{name: "an update of a Deployment carries them itself", kind: "Deployment",
			wantGeneration: `"generation":8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Operation: Update, DesiredChanged: true, User: alice, ScaleWrite: tc.scale,
				Child:     ObjectRef{APIVersion: "apps/v1", Kind: tc.kind, Name: "web"},
				OldObject: allowanceObject(tc.kind, 7, 2, "app:1", nil), NewObject: allowanceObject(tc.kind, 7, 4, "app:1", nil)}
			d := Decision{Result: Allow, Category: NoParent, ChildAnnotations: traced}
			got := DecideAllowances(context.Background(), d, in, AllowanceInputs{Policies: policies, NamespaceAnnotations: enforce})
			carried := got.ChildAnnotations
			if tc.wantAhead {
				carried = got.AnnotationsAhead
				if v := got.ChildAnnotations.Set[annotations.Allowances]; v != "" {
					t.Errorf("the allowances also follow the /scale: %s", v)
				}
				if got.ChildAnnotations.Set[annotations.Trace] == "" {
					t.Errorf("the trace no longer follows the /scale: %+v", got.ChildAnnotations)
				}
				if len(got.AnnotationsAhead.Set) != 1 || len(got.AnnotationsAhead.Remove) != 0 {
					t.Errorf("more than the allowances written ahead: %+v", got.AnnotationsAhead)
				}
			} else if got.AnnotationsAhead != nil {
				t.Errorf("annotations written ahead of a write that carries them: %+v", got.AnnotationsAhead)
			}
			if v := carried.Set[annotations.Allowances]; !strings.Contains(v, tc.wantGeneration) {
				t.Errorf("allowances %s, want %s", v, tc.wantGeneration)
			}
		})
	}
}

// TestDecideAllowancesOnWrittenPaths: a controller's merge patch of a
// child known by its metadata is checked on the paths the patch can
// change. Allowed, the verdict stands without the whole child; a path no
// allowance covers (maybe a field set to the value it has) is decided
// again on the whole child.
func TestDecideAllowancesOnWrittenPaths(t *testing.T) {
	enforce := map[string]string{annotations.AllowanceMode: "enforce"}
	granted := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":2,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":2,"field":"spec.replicas"}]}]`
	parent := allowanceObject("Deployment", 2, 4, "app:1", map[string]string{annotations.Allowances: granted})
	ctrl := &user.DefaultInfo{Name: testController}
	metadataOnly := func(replicas int64, image string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
			"metadata": map[string]any{"name": "web-1", "namespace": "ns", "generation": int64(1)}}}
		if replicas > 0 {
			_ = unstructured.SetNestedField(u.Object, replicas, "spec", "replicas")
		}
		if image != "" {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "app", "image": image}}, "spec", "template", "spec", "containers")
		}
		return u
	}
	for _, tc := range []struct {
		name       string
		written    []string
		coarse     bool
		new        *unstructured.Unstructured
		wantStands bool
		wantDeny   bool
	}{
		{name: "replicas: covered, stands", written: []string{"spec.replicas"}, new: metadataOnly(4, ""), wantStands: true},
		{name: "the template: no allowance, decided on the whole child", written: []string{"spec.template.spec.containers"}, coarse: true,
			new: metadataOnly(0, "evil:1"), wantDeny: true},
		{name: "no written paths: read from the objects, as before", new: metadataOnly(4, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: &settle.Facts{SettledAt: 1},
				Child:     ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1"},
				OldObject: metadataOnly(0, ""), NewObject: tc.new, WrittenPaths: tc.written, WrittenCoarse: tc.coarse}
			d := Decision{Result: Allow, Category: Expected}
			got := DecideAllowances(context.Background(), d, in, AllowanceInputs{Policies: allowanceTestPolicies(), NamespaceAnnotations: enforce})
			if (got.Result == Deny) != tc.wantDeny {
				t.Fatalf("result %s (%s), want deny=%v", got.Result, got.Message, tc.wantDeny)
			}
			if got.StandsOnMetadata(Update) != tc.wantStands {
				t.Errorf("StandsOnMetadata = %v, want %v (%+v)", !tc.wantStands, tc.wantStands, got.Allowances)
			}
		})
	}
}

// Only a controller acting for its parent is checked against allowances:
// drift, a person's change and writes that change no desired state are not.
func TestAllowanceCheckOf(t *testing.T) {
	tests := []struct {
		category Category
		want     AllowanceCheck
	}{
		{Expected, UsesAllowances}, {ParentInitializing, UsesAllowances}, {ControllerUnknown, UsesAllowances},
		{SelfHealing, StandingDuty}, {HistoryPruned, StandingDuty},
		{NewOrigin, NoAllowanceCheck}, {NoParent, NoAllowanceCheck}, {StatusWrite, NoAllowanceCheck},
		{NoDesiredChange, NoAllowanceCheck}, {ParentDeleting, NoAllowanceCheck}, {Frozen, NoAllowanceCheck},
		{DriftApproved, NoAllowanceCheck}, {DriftApprovedByPolicy, NoAllowanceCheck}, {DriftRejected, NoAllowanceCheck},
		{DriftUnapproved, NoAllowanceCheck}, {OwnControlsRefused, NoAllowanceCheck}, {StatusAnnotationsRefused, NoAllowanceCheck},
	}
	for _, tt := range tests {
		if got := AllowanceCheckOf(tt.category); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.category, got, tt.want)
		}
	}
}
