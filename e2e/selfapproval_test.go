//go:build !kind

package e2e

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// Until its first status write names it, nothing tells a new parent's
// controller from a person, so the proxy lets it write the parent's
// approvals. What it approved for itself approves none of its drift once
// it is known; the same approval given by a person does.
func TestAttackControllerApprovesItsOwnDriftBeforeItIsKnown(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "selfapprove", "enforce")
	everything := `[{"apiVersion":"*","kind":"*","name":"*","mode":"always"}]`
	_, err := f.ctrl.dyn.Resource(framework.WidgetGVR).Patch(ctx, f.widget, types.MergePatchType,
		annotationPatch(wgAnnApprovals, &everything), metav1.PatchOptions{FieldManager: wgManager})
	mustf(t, err, "the controller of the new Widget %s approves everything under it", f.widget)
	if by := f.getWidget().GetAnnotations()["kausality.io/approvals-by"]; !strings.HasPrefix(by, controllerid.LongHash(wgControllerUser)+":") {
		t.Fatalf("kausality.io/approvals-by = %q does not name the controller as the approval's writer", by)
	}

	_, err = f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates Gadget g")
	f.initialize()
	f.settleGadget("g", "Deny/DriftUnapproved")

	mark := wgMark(t)
	f.ctrl.warnings.take()
	_, err = f.setValue("g", "b", false)
	wgStatus(t, err, 403, "the controller's drift under its own approval")
	if !wgSomeContainsAll(f.ctrl.warnings.take(), "was given by the parent's own controller", "a person must") {
		t.Error("the denial does not warn that the approval was the controller's own")
	}
	d := wgDecisionBy(t, mark, wgControllerUser, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Deny", "DriftUnapproved")
	wgExpectField(t, d, "approvalsSetAside", 1)
	if v := f.gadgetValue("g"); v != "a" {
		t.Fatalf("Gadget g has value %q: the drift went through", v)
	}

	// alice gives the same approval through the proxy: it is hers too.
	twice := `[{"apiVersion":"*","kind":"*","name":"*","mode":"always"},{"apiVersion":"*","kind":"*","name":"*","mode":"always"}]`
	_, err = f.alice.dyn.Resource(framework.WidgetGVR).Patch(ctx, f.widget, types.MergePatchType,
		annotationPatch(wgAnnApprovals, &twice), metav1.PatchOptions{})
	mustf(t, err, "alice approves everything under Widget %s", f.widget)
	f.settleGadget("g", "Allow/DriftApproved")
	_, err = f.setValue("g", "b", false)
	mustf(t, err, "the controller's drift under alice's approval")
}

// The same holds for the modes it would set itself: on the first child it
// creates, before its status writes name it, and on its namespace.
func TestAttackControllerLowersItsOwnModeBeforeItIsKnown(t *testing.T) {
	ctx := context.Background()
	t.Run("on its first child", func(t *testing.T) {
		f := newWGFamily(t, "selfmode", "enforce")
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wgAPIVersion, "kind": "Gadget",
			"metadata": map[string]any{"name": "g", "namespace": f.ns, "annotations": map[string]any{wgAnnMode: "log"}},
			"spec":     map[string]any{"value": "a"},
		}}
		g.SetOwnerReferences([]metav1.OwnerReference{f.ownerRef()})
		_, err := f.gadgets(f.ctrl).Create(ctx, g, metav1.CreateOptions{FieldManager: wgManager})
		mustf(t, err, "the controller of the new Widget creates Gadget g in log mode")
		f.initialize()
		heldWarning(t, f, "the controller's drift of the Gadget it put in log mode", wgAnnMode+"=log on child", "was made by the parent's own controller")
	})
	t.Run("on its namespace", func(t *testing.T) {
		f := newWGFamily(t, "selfnsmode", "enforce")
		_, err := f.createGadget("g", "a", false)
		mustf(t, err, "the controller creates Gadget g")
		_, err = f.ctrl.kube.CoreV1().Namespaces().Patch(ctx, f.ns, types.MergePatchType, annotationPatch(wgAnnMode, ptr.To("log")), metav1.PatchOptions{})
		mustf(t, err, "the controller puts its namespace in log mode")
		f.initialize()
		heldWarning(t, f, "the controller's drift in the namespace it put in log mode",
			wgAnnMode+"=log on namespace "+f.ns, "was made by the parent's own controller", `the value before it, "enforce", does`)
		// A person who sets it again through the proxy is heard.
		alice := wgAlice(t)
		_, err = alice.kube.CoreV1().Namespaces().Patch(ctx, f.ns, types.MergePatchType, annotationPatch(wgAnnMode, ptr.To("enforce")), metav1.PatchOptions{})
		mustf(t, err, "alice puts the namespace in enforce mode")
		_, err = alice.kube.CoreV1().Namespaces().Patch(ctx, f.ns, types.MergePatchType, annotationPatch(wgAnnMode, ptr.To("log")), metav1.PatchOptions{})
		mustf(t, err, "alice puts the namespace in log mode")
		f.settleGadget("g", "Allow/DriftUnapproved")
	})
}

// heldWarning: the controller's drift of Gadget g is refused, with a
// warning that says all of warned.
func heldWarning(t *testing.T, f *wgFamily, what string, warned ...string) {
	t.Helper()
	f.settleGadget("g", "Deny/DriftUnapproved")
	f.ctrl.warnings.take()
	_, err := f.setValue("g", "b", false)
	wgStatus(t, err, 403, what)
	if got := f.ctrl.warnings.take(); !wgSomeContainsAll(got, warned...) {
		t.Errorf("%s: no warning says %q: %q", what, warned, got)
	}
}
