package decision

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

// rsPolicy approves the controller scaling web-1 from 1 to 3 replicas, in
// every namespace: a cluster policy.
func rsPolicy(expiry string, newOrigins bool) *policy.Compiled {
	rule := map[string]any{
		"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "*", "name": "web-*", "mode": "always",
		"prereqs":    map[string]any{"cel": "object.spec.replicas == 1"},
		"match":      map[string]any{"cel": "object.spec.replicas == 3 && oldObject.spec.replicas == 1"},
		"newOrigins": newOrigins,
	}
	if expiry != "" {
		rule["expiry"] = expiry
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kausality.io/v1alpha1", "kind": "ClusterApprovalPolicy",
		"metadata": map[string]any{"name": "deployment-controller", "uid": "u1", "generation": int64(1)},
		"spec": map[string]any{"rules": []any{rule},
			"serviceAccounts": []any{map[string]any{"namespace": "kube-system", "name": "deployment-controller"}}},
	}}
	return policy.Compile(u)
}

func TestPolicyDecisionOrder(t *testing.T) {
	const hit = "ClusterApprovalPolicy deployment-controller rule 0"
	tests := []struct {
		name     string
		in       func() Input
		result   Result
		category Category
		policy   string
		message  string
	}{
		{"no policy: unapproved", base, Deny, DriftUnapproved, "", "No ApprovalPolicy applies to " + ctrlUser},
		{"matching policy approves drift", func() Input {
			in := base()
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy("", false))
			return in
		}, Allow, DriftApprovedByPolicy, hit, ""},
		{"a rejection beats a matching policy", func() Input {
			in := base()
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy("", false))
			setAnn(annotations.Rejections, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","reason":"keep it"}]`)(in.Parent)
			return in
		}, Deny, DriftRejected, hit, hit + " matches this write, but a rejection wins"},
		{"an approval annotation comes before a policy", func() Input {
			in := base()
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy("", false))
			setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}]`)(in.Parent)
			return in
		}, Allow, DriftApproved, hit, ""},
		{"a policy whose prereq fails", func() Input {
			in := base()
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy("", false))
			_ = unstructured.SetNestedField(in.OldObject.Object, int64(2), "spec", "replicas")
			return in
		}, Deny, DriftUnapproved, "", "No rule of " + strings.TrimSuffix(hit, " rule 0") + " matched"},
		{"an expired policy", func() Input {
			in := base()
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy(now.Add(-time.Second).Format(time.RFC3339), false))
			return in
		}, Deny, DriftUnapproved, "", "matched"},
		{"a policy before its expiry", func() Input {
			in := base()
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy(now.Add(time.Hour).Format(time.RFC3339), false))
			return in
		}, Allow, DriftApprovedByPolicy, hit, ""},
		{"log mode: no policy matched, allowed with the would-be denial", func() Input {
			in := base()
			in.Mode.Default = annotations.ModeLog
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy(now.Add(-time.Second).Format(time.RFC3339), false))
			return in
		}, Allow, DriftUnapproved, "", "No rule of"},
		{"a new origin is recorded by a newOrigins rule", func() Input {
			in := base()
			alice(&in)
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy("", true))
			return in
		}, Allow, NewOrigin, hit, ""},
		{"a new origin is not matched without newOrigins", func() Input {
			in := base()
			alice(&in)
			in.Policies = policy.NewMatcher(context.Background(), rsPolicy("", false))
			return in
		}, Allow, NewOrigin, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in())
			if d.Result != tt.result || d.Category != tt.category {
				t.Fatalf("%s/%s (%s), want %s/%s", d.Result, d.Category, d.Reason, tt.result, tt.category)
			}
			got := ""
			if d.Policy != nil {
				got = d.Policy.String()
			}
			if got != tt.policy {
				t.Errorf("policy %q, want %q", got, tt.policy)
			}
			if !strings.Contains(d.Message, tt.message) {
				t.Errorf("message %q does not contain %q", d.Message, tt.message)
			}
			if tt.category == DriftApprovedByPolicy && (!strings.Contains(d.Reason, hit) || d.Report != ReportResolved || d.Trace == "") {
				t.Errorf("reason %q, report %q, trace %q", d.Reason, d.Report, d.Trace)
			}
		})
	}
}

// TestPolicyUnfinishedWarns: when the policies could not all be tried
// (here the request ended), nothing is approved by them and the write is
// told why.
func TestPolicyUnfinishedWarns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in := base()
	in.Policies = policy.NewMatcher(ctx, rsPolicy("", false))
	d := Decide(in)
	if d.Result != Deny || d.Category != DriftUnapproved {
		t.Fatalf("%s/%s (%s), want Deny/DriftUnapproved", d.Result, d.Category, d.Reason)
	}
	found := false
	for _, w := range d.Warnings {
		found = found || strings.Contains(w, "approval policies not fully evaluated at ClusterApprovalPolicy deployment-controller rule 0")
	}
	if !found {
		t.Errorf("warnings %q do not say the policies were not fully evaluated", d.Warnings)
	}
}
