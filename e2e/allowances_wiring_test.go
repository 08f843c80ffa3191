package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// TestAllowancePolicyStatus: the proxy watches AllowancePolicies and says
// in their Ready condition whether they compiled, and why not, for each
// generation.
func TestAllowancePolicyStatus(t *testing.T) {
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	policies := dyn.Resource(v1alpha1.AllowancePoliciesGVR)

	good := policyObject(t, `apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: e2e-wiring-status}
spec:
  match: {kind: Deployment, fields: [spec.replicas]}
  subjects: [{kind: User, name: alice, mayInitiate: true}]
  allow: [{kind: ReplicaSet, mutations: [spec.replicas]}]
`)
	created, err := policies.Create(ctx, good, metav1.CreateOptions{})
	mustf(t, err, "creating a valid allowance policy")
	t.Cleanup(func() { _ = policies.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
	expectAllowancePolicyCondition(t, dyn, created.GetName(), created.GetGeneration(), metav1.ConditionTrue, "Compiled")

	broken := created.DeepCopy()
	mustf(t, unstructured.SetNestedStringSlice(broken.Object, []string{"object.spec.replicas >"}, "spec", "match", "cel"), "setting CEL")
	var updated *unstructured.Unstructured
	mustf(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := policies.Get(ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		broken.SetResourceVersion(cur.GetResourceVersion())
		updated, err = policies.Update(ctx, broken, metav1.UpdateOptions{})
		return err == nil, nil
	}), "updating the policy with CEL that does not compile")
	msg := expectAllowancePolicyCondition(t, dyn, created.GetName(), updated.GetGeneration(), metav1.ConditionFalse, "")
	if !strings.Contains(msg, "spec.match.cel[0]") || !strings.Contains(msg, "grants no allowances") {
		t.Errorf("the condition does not name the broken condition and its consequence: %s", msg)
	}
}

// expectAllowancePolicyCondition waits for the proxy to write the Ready
// condition of the policy's generation, checks its status (and reason
// when given), and returns its message.
func expectAllowancePolicyCondition(t *testing.T, dyn dynamic.Interface, name string, generation int64, status metav1.ConditionStatus, reason string) string {
	t.Helper()
	var got *metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(v1alpha1.AllowancePoliciesGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var st v1alpha1.AllowancePolicyStatus
		raw, _, _ := unstructured.NestedMap(u.Object, "status")
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
		got = meta.FindStatusCondition(st.Conditions, "Ready")
		return got != nil && got.ObservedGeneration == generation, nil
	})
	mustf(t, err, "waiting for the Ready condition of generation "+name)
	if got.Status != status || (reason != "" && got.Reason != reason) {
		t.Fatalf("Ready of %s: %s/%s (%s), want %s/%s", name, got.Status, got.Reason, got.Message, status, reason)
	}
	return got.Message
}
