package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// decideUnderBoth decides as the interceptor does: under the owner after
// the write, and a moved child under the one it leaves too.
func decideUnderBoth(in Input, newParent, formerParent *unstructured.Unstructured) Decision {
	in.Parent = newParent
	d := Decide(in)
	if formerParent != nil {
		f := in
		f.Parent = formerParent
		former := Decide(f)
		d = UnderBoth(d, former)
		if former.Actor.IsController {
			d = KeepChildModes(d, in.OldObject, in.NewObject, userHashesOf(in).Long)
		}
	}
	return d
}

// The parent's controller tries to set its child's kausality.io/mode to
// "log" by dropping and re-adding the controller ownerReference during a
// rollout: the mode does not land, and once the parent settles, the
// child's drift is held as --default-mode=enforce says.
func TestParentControllerCannotSetChildModeByMovingItAway(t *testing.T) {
	rolling := &settle.Facts{AtCurrentSpec: false, Known: true, SpecSince: 5, Reason: "rolling out"}
	// 1. rollout window: strip the ownerReference and set mode=log.
	in := base()
	in.Settle = rolling
	in.DesiredChanged, in.Changes = false, nil
	in.NewObject = mkChild(1, withoutOwner, setAnn(annotations.Mode, "log"))
	d := decideUnderBoth(in, nil, mkParent())
	stored := in.NewObject.DeepCopy()
	if d.ChildAnnotations != nil {
		d.ChildAnnotations.Apply(stored)
	}
	if d.Result != Allow {
		t.Fatalf("moving the child away during the rollout: %s/%s %s", d.Result, d.Category, d.Reason)
	}
	if v, ok := stored.GetAnnotations()[annotations.Mode]; ok {
		t.Fatalf("the former parent's controller set its child's %s=%s", annotations.Mode, v)
	}
	// Had it landed, the child's drift after re-adoption would be decided
	// in its own mode.
	_ = unstructured.SetNestedField(stored.Object, map[string]interface{}{annotations.Mode: "log"}, "metadata", "annotations")
	// 2. re-add the ownerReference, metadata only.
	in2 := base()
	in2.Settle = rolling
	in2.DesiredChanged, in2.Changes = false, nil
	in2.OldObject = stored
	back := mkChild(1, setAnn(annotations.Mode, "log"))
	in2.NewObject = back
	d2 := decideUnderBoth(in2, mkParent(), nil)
	if d2.Result != Allow {
		t.Fatalf("re-adopting the child during the rollout: %s/%s %s", d2.Result, d2.Category, d2.Reason)
	}
	if d2.ChildAnnotations != nil {
		d2.ChildAnnotations.Apply(back)
	}
	if v, ok := back.GetAnnotations()[annotations.Mode]; ok {
		t.Fatalf("the adopted child keeps the %s=%s it had as an orphan", annotations.Mode, v)
	}
	// 3. parent settled: the controller's drift.
	in3 := base()
	in3.Settle = &settle.Facts{AtCurrentSpec: true, Known: true, SpecSince: 5, Reason: "settled"}
	in3.OldObject = back
	in3.NewObject = mkChild(3, setAnn(annotations.Mode, "log"))
	d3 := Decide(in3)
	t.Logf("step1 %s/%s; step2 %s/%s; step3 %s/%s mode=%s from %s", d.Result, d.Category, d2.Result, d2.Category, d3.Result, d3.Category, d3.Mode, d3.ModeSource)
	if d3.Result == Allow {
		t.Fatalf("the parent's controller set its child's kausality.io/mode and its drift is now allowed under enforce: %s", d3.Reason)
	}
}

// Under a settled parent in enforce mode, the parent's controller creates
// its child as an orphan (a new origin) carrying kausality.io/mode=log,
// then adopts it with a metadata-only write. The adoption is held as the
// create under the parent would be; adopted while the parent rolls out,
// the child leaves the mode it was created with behind.
func TestAnOrphanAdoptedByTheParentsControllerIsDecidedUnderTheParent(t *testing.T) {
	settled := &settle.Facts{AtCurrentSpec: true, Known: true, SpecSince: 5, Reason: "settled"}
	// the create under the parent is drift, denied:
	direct := base()
	direct.Operation, direct.OldObject, direct.Settle = Create, nil, settled
	if d := Decide(direct); d.Result != Deny {
		t.Fatalf("precondition: a create under the settled parent is %s/%s", d.Result, d.Category)
	}
	// 1. create without ownerReference, with mode=log
	in := base()
	in.Operation, in.OldObject, in.Settle = Create, nil, settled
	in.NewObject = mkChild(3, withoutOwner, setAnn(annotations.Mode, "log"))
	d1 := decideUnderBoth(in, nil, nil)
	created := in.NewObject.DeepCopy()
	if d1.ChildAnnotations != nil {
		d1.ChildAnnotations.Apply(created)
	}
	// 2. adopt: add the controller ownerReference, nothing else
	in2 := base()
	in2.Settle = settled
	in2.OldObject = created
	adopted := created.DeepCopy()
	adopted.SetOwnerReferences(mkChild(1).GetOwnerReferences())
	in2.NewObject = adopted
	in2.DesiredChanged, in2.Changes = false, nil
	if d2 := decideUnderBoth(in2, mkParent(), nil); d2.Result != Deny || d2.Category != DriftUnapproved {
		t.Errorf("adopting the orphan under the settled parent in enforce mode: %s/%s (mode %s from %s), want held as drift",
			d2.Result, d2.Category, d2.Mode, d2.ModeSource)
	}

	// While the parent rolls out, the adoption carries out its spec; the
	// orphan's mode does not come along.
	in2.Settle = &settle.Facts{AtCurrentSpec: false, Known: true, SpecSince: 5, Reason: "rolling out"}
	d2 := decideUnderBoth(in2, mkParent(), nil)
	if d2.Result != Allow {
		t.Fatalf("adopting the orphan while the parent rolls out: %s/%s %s", d2.Result, d2.Category, d2.Reason)
	}
	stored := adopted.DeepCopy()
	if d2.ChildAnnotations != nil {
		d2.ChildAnnotations.Apply(stored)
	}
	if v, ok := stored.GetAnnotations()[annotations.Mode]; ok {
		t.Fatalf("the adopted child keeps the %s=%s it was created with as an orphan", annotations.Mode, v)
	}
	// 3. drift on the adopted child, once the parent settled
	in3 := base()
	in3.Settle = settled
	in3.OldObject = stored
	n := stored.DeepCopy()
	_ = unstructured.SetNestedField(n.Object, int64(7), "spec", "replicas")
	in3.NewObject = n
	if d3 := Decide(in3); d3.Result != Deny {
		t.Errorf("the adopted child's drift: %s/%s (mode %s from %s), want held", d3.Result, d3.Category, d3.Mode, d3.ModeSource)
	}
}

// A mode the parent's controller set stays its own when the controller
// moves the child from a parent it is known for to one too new to name it,
// asking to drop the mode: the mode is put back, and so is its setter, so
// the next drift is still not gated by it.
func TestAModeTheControllerSetStaysItsAcrossAMove(t *testing.T) {
	ctrlLong := controllerid.LongHash(ctrlUser)
	recorded := "mode=" + ctrlLong + ":" + annotations.Digest([]byte("log"))
	rolling := mkParent(obsGen(4))
	fresh := mkParent(noObsGen, noManagedFields, delAnn(annotations.Phase), func(u *unstructured.Unstructured) {
		u.SetName("web2")
		u.SetUID("p2-uid")
	})
	old := mkChild(1, setAnn(annotations.Mode, "log"), setAnn(annotations.ModesBy, recorded))
	moved := mkChild(1, setAnn(annotations.ModesBy, recorded), func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(u.Object, []interface{}{map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web2", "uid": "p2-uid", "controller": true}}, "metadata", "ownerReferences")
	})
	in := base()
	in.OldObject, in.NewObject, in.DesiredChanged, in.Changes = old, moved, false, nil
	d := decideUnderBoth(in, fresh, rolling)
	if d.Result != Allow {
		t.Fatalf("the move is refused: %s %s", d.Category, d.Reason)
	}
	stored := moved.DeepCopy()
	d.ChildAnnotations.Apply(stored)
	if got := stored.GetAnnotations()[annotations.Mode]; got != "log" {
		t.Fatalf("stored mode %q, want the stored log kept", got)
	}
	if setter := annotations.ModeSetBy(stored.GetAnnotations(), annotations.Mode); setter.User != ctrlLong {
		t.Fatalf("after the move kausality.io/modes-by = %q names %q as the mode's setter, want the controller", stored.GetAnnotations()[annotations.ModesBy], setter.User)
	}
	drift := base()
	drift.OldObject = mkChild(1, setAnn(annotations.Mode, "log"), setAnn(annotations.ModesBy, stored.GetAnnotations()[annotations.ModesBy]))
	if got := Decide(drift); got.Result != Deny || got.ModeSource != ModeFromDefault {
		t.Fatalf("the controller's next drift: %s in mode %s from %s, want Deny under the default", got.Result, got.Mode, got.ModeSource)
	}
}
