package policywatch

import (
	"context"
	"strings"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

// byServiceAccount indexes ClusterApprovalPolicies by the service
// accounts they name ("ns/name").
const byServiceAccount = "serviceAccount"

// Approvals watches ApprovalPolicies and ClusterApprovalPolicies. Until
// its caches have synced it has no policies: a policy only approves, so
// deciding without it is the strict side.
type Approvals struct {
	namespaced *Watcher[*policy.Compiled, policy.Problem]
	cluster    *Watcher[*policy.Compiled, policy.Problem]
}

// NewApprovals returns the watcher; Run starts it. fieldManager owns the
// status writes.
func NewApprovals(dyn dynamic.Interface, fieldManager string, log *zap.Logger) *Approvals {
	kind := Kind[*policy.Compiled, policy.Problem]{
		Name:         "approval policy",
		GVR:          v1alpha1.ApprovalPoliciesGVR,
		Compile:      policy.Compile,
		Ready:        approvalReady,
		FieldManager: fieldManager,
	}
	clusterKind := kind
	clusterKind.GVR = v1alpha1.ClusterApprovalPoliciesGVR
	clusterKind.Indexers = cache.Indexers{byServiceAccount: serviceAccountIndex}
	clusterKind.Less = func(a, b *policy.Compiled) int { return strings.Compare(a.Ref.Name, b.Ref.Name) }
	return &Approvals{namespaced: New(dyn, kind, log), cluster: New(dyn, clusterKind, log)}
}

func serviceAccountIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	sas, _, _ := unstructured.NestedSlice(u.Object, "spec", "serviceAccounts")
	var out []string
	for _, sa := range sas {
		m, _ := sa.(map[string]any)
		ns, _ := m["namespace"].(string)
		name, _ := m["name"].(string)
		if ns != "" && name != "" {
			out = append(out, ns+"/"+name)
		}
	}
	return out, nil
}

// approvalReady is what the proxy has to say about an approval policy:
// the problems of its compilation, and the cost limits its current
// generation exceeded.
func approvalReady(_ *unstructured.Unstructured, c *policy.Compiled, exceeded []policy.Problem) metav1.Condition {
	problems := append(append([]policy.Problem(nil), c.Problems...), exceeded...)
	findings := make([]policy.Finding, len(problems))
	for i, p := range problems {
		findings[i] = p.Finding()
	}
	ready := "every rule compiled"
	if c.Ref.Kind == v1alpha1.ApprovalPolicyKind {
		ready += "; its rules approve writes in namespace " + c.Ref.Namespace + " only"
	}
	return policy.ReadyCondition(c.Generation, findings, ready, "")
}

// Run starts the informers and the status writers until ctx is done.
func (a *Approvals) Run(ctx context.Context) {
	// A policy met first by a write would otherwise pay for building the
	// CEL environment on the write path.
	go policy.Warm()
	a.namespaced.Run(ctx)
	a.cluster.Run(ctx)
}

// HasSynced reports whether both policy caches hold what kube-apiserver
// has (or kube-apiserver serves no such kind). Until then For returns no
// policies: a write a policy would approve is decided as unapproved drift.
func (a *Approvals) HasSynced() bool {
	return a.namespaced.HasSynced() && a.cluster.HasSynced()
}

// For returns the compiled policies that apply to user, its namespace's
// ApprovalPolicy of its name first, then ClusterApprovalPolicies by name.
// It does no I/O.
func (a *Approvals) For(user string) []*policy.Compiled {
	sa, ok := policy.ServiceAccountOf(user)
	if !ok {
		return nil
	}
	var out []*policy.Compiled
	if c, ok := a.namespaced.Get(sa.Namespace + "/" + sa.Name); ok {
		out = append(out, c)
	}
	return append(out, a.cluster.ByIndex(byServiceAccount, sa.Namespace+"/"+sa.Name)...)
}

// Report records evaluations that exceeded the cost limit or a write's
// budget, for the policies' status.
func (a *Approvals) Report(problems []policy.EvalProblem) {
	for _, pr := range problems {
		w, key := a.namespaced, pr.Policy.Namespace+"/"+pr.Policy.Name
		if pr.Policy.Kind == v1alpha1.ClusterApprovalPolicyKind {
			w, key = a.cluster, pr.Policy.Name
		}
		w.Report(key, pr.Generation, pr.Problem)
	}
}
