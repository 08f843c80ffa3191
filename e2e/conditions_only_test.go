package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// writeStatus is the operator's status write of the Widget: status
// replaces it whole.
func (f *wgFamily) writeStatus(what string, status map[string]any) {
	f.t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		w, err := f.ctrl.dyn.Resource(framework.WidgetGVR).Get(ctx, f.widget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		w.Object["status"] = status
		_, err = f.ctrl.dyn.Resource(framework.WidgetGVR).UpdateStatus(ctx, w, metav1.UpdateOptions{FieldManager: wgManager})
		return err
	})
	mustf(f.t, err, "the operator writes %s on Widget %s", what, f.widget)
}

// setReadyCondition is the status write of an operator that reports its
// observed generation only in its Ready condition, as Crossplane-style
// resources and many kubebuilder operators do: no status.observedGeneration.
func (f *wgFamily) setReadyCondition(observed int64) {
	f.t.Helper()
	f.writeStatus(fmt.Sprintf("Ready with observedGeneration %d", observed), map[string]any{
		"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "Reconciled", "observedGeneration": observed,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}},
	})
}

// TestConditionsOnlyParentCarriesOutSpecChanges: a parent whose operator
// reports its observed generation only in a Ready condition. After a
// person's spec change its Ready=True is stale (it names the previous
// generation), so the operator's update of its child carries out the
// change; once Ready names the new generation, the operator's revert of a
// person's edit of the child is drift, and held.
func TestConditionsOnlyParentCarriesOutSpecChanges(t *testing.T) {
	f := newWGFamily(t, "condonly", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the operator creates its Gadget")
	f.setReadyCondition(f.getWidget().GetGeneration())
	eventually(t, 30*time.Second, "the Widget is initialized", func() error {
		if got := f.getWidget().GetAnnotations()[wgAnnPhase]; got != "initialized" {
			return fmt.Errorf("%s = %q", wgAnnPhase, got)
		}
		return nil
	})
	f.settleGadget("g", "Deny/DriftUnapproved")

	generation := f.bumpSpec()
	// Ready=True still names the previous generation: the spec change is
	// being carried out.
	f.settleGadget("g", "Allow/Expected")
	_, err = f.setValue("g", "b", false)
	mustf(t, err, "the operator carries out the spec change on its Gadget")
	f.setReadyCondition(generation)
	f.settleGadget("g", "Deny/DriftUnapproved")

	_, err = f.writeGadget(f.alice, "g", false, func(g *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(g.Object, "person", "spec", "value")
	})
	mustf(t, err, "a person edits the Gadget")
	_, err = f.setValue("g", "b", false)
	wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
	if got := f.gadgetValue("g"); got != "person" {
		t.Fatalf("the Gadget's value is %q after the operator's revert was denied, want the person's", got)
	}
}
