package notify

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// A write that mutates what no allowance covers is reported in log and
// enforce mode, as a Detected report naming the mutated field and the
// allowance it needed, whether or not it is drift; shadow only logs.
func TestFromDecisionAllowanceViolations(t *testing.T) {
	template := allowance.Violation{Mutation: "spec.template", NeededKind: "ReplicaSet", NeededMutation: "spec.template", Message: "long text"}
	parent := &decision.ParentInfo{Ref: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"}}
	tests := []struct {
		name      string
		report    decision.ReportPhase
		outcome   *decision.AllowanceOutcome
		wantPhase v1alpha1.DriftReportPhase
		want      *v1alpha1.AllowanceVerdict
	}{
		{"expected write, log violation", decision.ReportNone,
			&decision.AllowanceOutcome{Mode: allowance.ModeLog, Checked: true, Violations: []allowance.Violation{template}},
			v1alpha1.PhaseDetected, &v1alpha1.AllowanceVerdict{Mode: "log", Violations: []v1alpha1.AllowanceViolation{{Field: "spec.template", NeededKind: "ReplicaSet", NeededMutation: "spec.template"}}}},
		{"held by enforce", decision.ReportNone,
			&decision.AllowanceOutcome{Mode: allowance.ModeEnforce, Checked: true, Violations: []allowance.Violation{template, {Mutation: "create", NeededKind: "ReplicaSet", NeededMutation: "create"}}},
			v1alpha1.PhaseDetected, &v1alpha1.AllowanceVerdict{Mode: "enforce", Violations: []v1alpha1.AllowanceViolation{
				{Field: "spec.template", NeededKind: "ReplicaSet", NeededMutation: "spec.template"}, {Field: "create", NeededKind: "ReplicaSet", NeededMutation: "create"}}}},
		{"shadow only logs", decision.ReportNone,
			&decision.AllowanceOutcome{Mode: allowance.ModeShadow, Checked: true, Violations: []allowance.Violation{template}}, "", nil},
		{"justified", decision.ReportNone,
			&decision.AllowanceOutcome{Mode: allowance.ModeEnforce, Checked: true, Justification: []allowance.Justification{{Mutation: "spec.replicas"}}}, "", nil},
		{"not checked", decision.ReportNone, nil, "", nil},
		{"drift with a violation too", decision.ReportDetected,
			&decision.AllowanceOutcome{Mode: allowance.ModeLog, Checked: true, Violations: []allowance.Violation{template}},
			v1alpha1.PhaseDetected, &v1alpha1.AllowanceVerdict{Mode: "log", Violations: []v1alpha1.AllowanceViolation{{Field: "spec.template", NeededKind: "ReplicaSet", NeededMutation: "spec.template"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &decision.Decision{Parent: parent, Child: decision.ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "web-1"},
				Report: tt.report, Allowances: tt.outcome}
			r := FromDecision(d, Write{Operation: decision.Update, OldObject: &unstructured.Unstructured{Object: map[string]any{}},
				Changes: []desired.Change{{Path: "spec.template.spec.containers[name=web].image"}}})
			if r.Spec.Phase != tt.wantPhase {
				t.Errorf("phase %q, want %q", r.Spec.Phase, tt.wantPhase)
			}
			if (r.Spec.ID != "") != (tt.wantPhase == v1alpha1.PhaseDetected) {
				t.Errorf("id %q for phase %q", r.Spec.ID, r.Spec.Phase)
			}
			got, want := r.Spec.Allowances, tt.want
			if (got == nil) != (want == nil) {
				t.Fatalf("allowances %+v, want %+v", got, want)
			}
			if got == nil {
				return
			}
			if got.Mode != want.Mode || len(got.Violations) != len(want.Violations) {
				t.Fatalf("allowances %+v, want %+v", got, want)
			}
			for i := range want.Violations {
				if got.Violations[i] != want.Violations[i] {
					t.Errorf("violation %d: %+v, want %+v", i, got.Violations[i], want.Violations[i])
				}
			}
		})
	}
}
