package e2e

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// Escapes by ownerReference: a controller moves its child away from its
// parent in a write that changes nothing else, so that the parent's freeze,
// settledness or stored mode no longer applies. Each such write is decided
// under the parent it leaves.

// moveGadget is the controller's read-modify-update of Gadget g that sets
// its controller ownerReference to owner (nil removes it) and applies
// also.
func (f *wgFamily) moveGadget(owner *metav1.OwnerReference, dryRun bool, also func(*unstructured.Unstructured)) error {
	_, err := f.writeGadget(f.ctrl, "g", dryRun, func(g *unstructured.Unstructured) {
		if owner == nil {
			g.SetOwnerReferences(nil)
		} else {
			g.SetOwnerReferences([]metav1.OwnerReference{*owner})
		}
		if also != nil {
			also(g)
		}
	})
	return err
}

func (f *wgFamily) gadgetOwner(name string) string {
	f.t.Helper()
	g, err := f.gadgets(f.ctrl).Get(context.Background(), name, metav1.GetOptions{})
	mustf(f.t, err, "get Gadget %s", name)
	if ref := metav1.GetControllerOf(g); ref != nil {
		return ref.Kind + "/" + ref.Name
	}
	return "<none>"
}

// TestAttackOwnerReferenceRemovalEscapesFreeze: the controller removes the
// controller ownerReference of a frozen Widget's Gadget (a metadata-only
// write) to change its spec without a parent afterwards. The removal is
// held by the freeze.
func TestAttackOwnerReferenceRemovalEscapesFreeze(t *testing.T) {
	f := newInitializedGadgetFamily(t, "escape-freeze", "enforce")
	freeze := "true"
	f.annotateWidget(map[string]*string{wgAnnFreeze: &freeze})
	f.settle("Deny/Frozen", func() error { return f.moveGadget(nil, true, nil) })

	err := f.moveGadget(nil, false, nil)
	wgDenied(t, err, f, "Gadget", "g", wgAnnFreeze)
	if got := f.gadgetOwner("g"); got != "Widget/"+f.widget {
		t.Fatalf("the Gadget's controller is %s after the held removal, want Widget/%s", got, f.widget)
	}
}

// TestAttackOwnerReferenceDecoySetsLogMode: the controller points its
// Gadget at a decoy Widget while setting kausality.io/mode: log on it, to
// point it back later and drift in log mode. Leaving the settled Widget is
// drift, and held.
func TestAttackOwnerReferenceDecoySetsLogMode(t *testing.T) {
	f := newWGFamily(t, "escape-decoy", "enforce")
	decoy := newWGFamily(t, "escape-decoy-target", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "create Gadget")
	f.initialize()
	f.settleGadget("g", "Deny/DriftUnapproved")

	decoyRef := decoy.ownerRef()
	decoyRef.BlockOwnerDeletion = ptr.To(false)
	setLog := func(g *unstructured.Unstructured) {
		ann := g.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[wgAnnMode] = "log"
		g.SetAnnotations(ann)
	}
	err = f.moveGadget(&decoyRef, false, setLog)
	if got := wgCategory(err, nil); got != "Deny/DriftUnapproved" {
		t.Fatalf("the controller re-points its Gadget at a decoy while setting mode log: %s, want Deny/DriftUnapproved", got)
	}
	g, err := f.gadgets(f.ctrl).Get(context.Background(), "g", metav1.GetOptions{})
	mustf(t, err, "get Gadget")
	if mode := g.GetAnnotations()[wgAnnMode]; mode != "" {
		t.Fatalf("the Gadget's stored mode is %q, want none", mode)
	}
	if got := f.gadgetOwner("g"); got != "Widget/"+f.widget {
		t.Fatalf("the Gadget's controller is %s, want Widget/%s", got, f.widget)
	}
}

// TestAttackOwnerReferenceMoveKeepsOnceApproval: a move away from a
// settled parent that a once approval admits consumes that approval, so it
// cannot admit a further drift.
func TestAttackOwnerReferenceMoveKeepsOnceApproval(t *testing.T) {
	f := newOnceApprovedGadget(t, "escape-once")
	// Under the parent it joins (none) the move is a new origin; the
	// approval it uses is the one of the parent it leaves.
	f.settle("Allow/NoParent", func() error { return f.moveGadget(nil, true, nil) })

	mustf(t, f.moveGadget(nil, false, nil), "the approved move away from the Widget")
	if got := f.gadgetOwner("g"); got != "<none>" {
		t.Fatalf("the Gadget's controller is %s after the approved removal", got)
	}
	eventuallyNoApprovals := func() error {
		if v := f.getWidget().GetAnnotations()[wgAnnApprovals]; v != "" {
			return fmt.Errorf("%s = %s", wgAnnApprovals, v)
		}
		return nil
	}
	if err := eventuallyNoApprovals(); err != nil {
		t.Fatalf("the once approval was not consumed by the move: %v", err)
	}
}
