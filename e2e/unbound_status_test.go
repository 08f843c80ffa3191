package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// patchAvailable is the status write of an operator that patches its
// status (controller-runtime's Status().Patch with client.MergeFrom): a
// merge patch that names no resourceVersion, which kube-apiserver applies
// to whatever is stored, however old the operator's copy.
func (f *wgFamily) patchAvailable(status string) {
	f.t.Helper()
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": "Available", "status": status, "reason": "Reconciling",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}})
	mustf(f.t, err, "status patch")
	_, err = f.ctrl.dyn.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType, data,
		metav1.PatchOptions{FieldManager: wgManager}, "status")
	mustf(f.t, err, "the operator patches Available=%s on Widget %s", status, f.widget)
}

func (f *wgFamily) recordedObservedGeneration() string {
	return f.getWidget().GetAnnotations()[annotations.ObservedGeneration]
}

// waitRecorded waits for the proxy to credit the Widget's status with
// generation: one --unbound-status-record-delay after the status write,
// within the suite's slack.
func (f *wgFamily) waitRecorded(generation int64, what string) {
	f.t.Helper()
	eventually(f.t, 90*time.Second, what, func() error {
		if got := f.recordedObservedGeneration(); got != fmt.Sprint(generation) {
			return fmt.Errorf("%s = %q, want %d", annotations.ObservedGeneration, got, generation)
		}
		return nil
	})
}

// TestAStalePatchedStatusDoesNotSettleTheNewSpec: the memcached pattern,
// with its status patched rather than updated. The operator computes its
// status for the spec it read; a person's spec change lands before its
// patch does. kube-apiserver applies the patch to the new generation, so
// crediting the patch with that generation at once would settle the
// parent at a spec its operator has not acted on, and refuse the
// operator's writes that carry the change out, for good (its later status
// patches keep crediting the same generation). The proxy records the
// generation of a status write that names no resourceVersion only once
// --unbound-status-record-delay has passed: the operator carries the
// change out, and once the record lands its revert of a person's edit is
// drift again.
func TestAStalePatchedStatusDoesNotSettleTheNewSpec(t *testing.T) {
	f := newWGFamily(t, "patchstatus", "enforce")
	ctx := context.Background()
	size := f.widgetSize

	// The first status write: until its record lands the Widget is still
	// initializing, and its operator's writes pass.
	f.patchAvailable("Unknown")
	_, err := f.ctrl.kube.AppsV1().Deployments(f.ns).Create(ctx, f.memcachedDeployment(size()), metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the operator creates its Deployment")
	f.patchAvailable("True")
	// A person's spec change before the first record has landed: the
	// operator carries it out.
	first := f.bumpSpec()
	mustf(t, f.reconcileSize(size(), false), "the operator scales its Deployment to the size %d of the spec change it has not reported", size())
	f.patchAvailable("True")
	f.waitRecorded(first, "the patched status is credited with its generation once the delay has passed")
	f.settleReconcile(size()+1, "Deny/DriftUnapproved")

	// A person changes the spec; the operator's patch of the status it
	// computed before lands after it.
	gen := f.bumpSpec()
	f.patchAvailable("True")
	// Recorded at once, the generation would be there within the side
	// write's round trip; it stays behind for the delay.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if got := f.recordedObservedGeneration(); got == fmt.Sprint(gen) {
			t.Fatalf("the stale status patch was credited with generation %d at once", gen)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The operator sees the change and carries it out: not drift.
	mustf(t, f.reconcileSize(size(), false), "the operator scales its Deployment to the new size %d", size())
	f.patchAvailable("True")

	// Once the delay has passed the generation is recorded, and the
	// operator's revert of a person's edit is drift again.
	f.waitRecorded(gen, "the patched status is credited with the new generation")
	f.settleReconcile(size()+1, "Deny/DriftUnapproved")
}

// TestAKindsOwnUnboundStatusRecordDelay: the config file sets the delay of
// one kind. Its patched status is credited once that delay has passed,
// long before the proxy's default (30s), and not at once.
func TestAKindsOwnUnboundStatusRecordDelay(t *testing.T) {
	const delay = 3 * time.Second
	setConfig(t, framework.BaseConfig+fmt.Sprintf(`unboundStatusRecordDelays:
- apiGroup: %s
  kind: Widget
  delay: %s
`, framework.TestGroup, delay))
	f := newWGFamily(t, "kinddelay", "enforce")

	f.patchAvailable("True")
	written := time.Now()
	gen := f.getWidget().GetGeneration()
	want := fmt.Sprint(gen)
	if got := f.recordedObservedGeneration(); got == want {
		t.Fatalf("the status patch was credited with generation %d at once, before the Widget's delay of %s", gen, delay)
	}
	// Well before the default delay: the kind's own was taken.
	eventually(t, 20*time.Second, "the Widget's status patch credited after its own delay", func() error {
		if got := f.recordedObservedGeneration(); got != want {
			return fmt.Errorf("%s = %q, want %s", annotations.ObservedGeneration, got, want)
		}
		return nil
	})
	if waited := time.Since(written); waited < delay-time.Second {
		t.Errorf("credited %s after the status patch, before the Widget's delay of %s", waited.Round(time.Millisecond), delay)
	}
}
