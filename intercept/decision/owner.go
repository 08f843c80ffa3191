package decision

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// ControllerMoved reports whether a write removes or re-points the
// controller ownerReference: to another object, kind or API group (kinds
// of one name are served by many groups; only the version may change).
func ControllerMoved(old, new *unstructured.Unstructured) bool {
	if old == nil || new == nil {
		return false
	}
	before, after := metav1.GetControllerOfNoCopy(old), metav1.GetControllerOfNoCopy(new)
	switch {
	case before == nil:
		return false
	case after == nil:
		return true
	}
	return before.UID != after.UID || before.Kind != after.Kind || before.Name != after.Name || !sameGroup(before.APIVersion, after.APIVersion)
}

// sameGroup reports whether two apiVersions name one API group; one that
// cannot be parsed names only itself.
func sameGroup(a, b string) bool {
	ga, errA := schema.ParseGroupVersion(a)
	gb, errB := schema.ParseGroupVersion(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return ga.Group == gb.Group
}

// Adopted reports whether a write gives an object that has no controller
// ownerReference one.
func Adopted(old, new *unstructured.Unstructured) bool {
	return old != nil && new != nil && metav1.GetControllerOfNoCopy(old) == nil && metav1.GetControllerOfNoCopy(new) != nil
}

// childModes are the controls of a child that decide how its own writes
// are gated.
var childModes = [...]string{annotations.Mode, annotations.AllowanceMode}

// KeepChildModes returns d with the child's modes as stored: the write is
// made by the controller of a parent of the child (the one it joins or the
// one it leaves), who may not choose how its own writes to the child are
// gated. An adoption leaves none of them at all: they were written while
// the child had no parent to answer to, maybe by the controller adopting
// it (an orphan created with mode log, then adopted, would drift unheld).
//
// The record of who set the child's modes (kausality.io/modes-by) is made
// again on what is stored then: a mode put back keeps its setter, one left
// behind is nobody's, and writer sets the others as asked.
func KeepChildModes(d Decision, old, new *unstructured.Unstructured, writer string) Decision {
	if d.Result != Allow || old == nil || new == nil {
		return d
	}
	stored, written := old.GetAnnotations(), new.GetAnnotations()
	after := make(map[string]string, len(childModes))
	for _, k := range childModes {
		if v, ok := written[k]; ok {
			after[k] = v
		}
	}
	if d.ChildAnnotations != nil {
		for _, k := range childModes {
			if v, ok := d.ChildAnnotations.Set[k]; ok {
				after[k] = v
			}
			if slices.Contains(d.ChildAnnotations.Remove, k) {
				delete(after, k)
			}
		}
	}
	adopted := Adopted(old, new)
	for _, k := range childModes {
		want, keep := stored[k]
		if adopted {
			keep = false
		}
		got, has := after[k]
		switch {
		case keep && (!has || got != want):
			d.ChildAnnotations = withSet(d.ChildAnnotations, k, want)
		case !keep && has:
			d.ChildAnnotations = withRemoved(d.ChildAnnotations, k)
		}
	}
	return withModeSetters(d, stored, written, writer)
}

// withModeSetters is d with the kausality.io/modes-by of what it stores, a
// write of requested onto an object holding stored, by writer.
func withModeSetters(d Decision, stored, requested map[string]string, writer string) Decision {
	after := make(map[string]string, len(requested)+2)
	for k, v := range requested {
		after[k] = v
	}
	if d.ChildAnnotations != nil {
		for _, k := range d.ChildAnnotations.Remove {
			delete(after, k)
		}
		for k, v := range d.ChildAnnotations.Set {
			after[k] = v
		}
	}
	was := stored[annotations.ModesBy]
	record := annotations.RecordModeSetters(was, stored, after, requested, writer)
	if record != after[annotations.ModesBy] {
		d.ChildAnnotations = withRecord(d.ChildAnnotations, annotations.ModesBy, record)
	}
	return d
}
