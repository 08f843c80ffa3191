//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// TestAllowancesAcceptKindInItsGroup: an AllowancePolicy names its kinds
// with their API group. One that speaks of a Widget of another group does
// not govern the test group's Widget: its controller creates a Gadget in
// an enforce namespace unchecked. Named with the Widget's own group, the
// same policy governs it, and the same create (no allowance on the Widget,
// which is still working on its spec) is refused.
func TestAllowancesAcceptKindInItsGroup(t *testing.T) {
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	policies := dyn.Resource(v1alpha1.AllowancePoliciesGVR)
	p := policyObject(t, `apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: e2e-accept-group-widget}
spec:
  match: {kind: Widget, group: other.example.com, fields: [spec]}
  subjects: [{kind: ServiceAccount, namespace: `+wgControllerNS+`, name: `+wgControllerSA+`}]
  allow: [{kind: Gadget, group: `+framework.TestGroup+`, mutations: [create]}]
`)
	created, err := policies.Create(ctx, p, metav1.CreateOptions{})
	mustf(t, err, "creating the policy")
	t.Cleanup(func() { _ = policies.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
	expectAllowancePolicyCondition(t, dyn, created.GetName(), created.GetGeneration(), metav1.ConditionTrue, "Compiled")

	f := newWGFamily(t, "accept-group", "log")
	_, err = directClient(t).CoreV1().Namespaces().Patch(ctx, f.ns, types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"enforce"}}}`, annotations.AllowanceMode)), metav1.PatchOptions{})
	mustf(t, err, "turning allowances on for the namespace")

	// The Widget reports that it is working on its spec, so the creates
	// below carry out a change of it (they need an allowance) rather than
	// a standing duty of a parent settled at its spec.
	f.setStatus(false)

	mark := wgMark(t)
	_, err = f.createGadget("other-group", "a", false)
	mustf(t, err, "the controller creates a Gadget under a Widget no policy of its group speaks of")
	for _, l := range wgDecisionsAfter(t, mark, "gadgets", f.ns, "other-group") {
		if l.Str("allowanceMode") != "" {
			t.Errorf("the Gadget create was checked against allowances: %s", intentDescribe([]framework.DecisionLine{l}))
		}
	}

	// The same policy, named with the Widget's group.
	var updated *unstructured.Unstructured
	mustf(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := policies.Get(ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_ = unstructured.SetNestedField(cur.Object, framework.TestGroup, "spec", "match", "group")
		updated, err = policies.Update(ctx, cur, metav1.UpdateOptions{})
		return err == nil, nil
	}), "naming the Widget's group in the policy")
	expectAllowancePolicyCondition(t, dyn, updated.GetName(), updated.GetGeneration(), metav1.ConditionTrue, "Compiled")
	_, err = f.createGadget("same-group", "a", false)
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusForbidden {
		t.Fatalf("the controller's create under a Widget its group's policy governs, with no allowance: %v, want 403", err)
	}
	acceptExpectViolation(t, err, "create")
}
