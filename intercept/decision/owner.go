package decision

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ControllerMoved reports whether a write removes or re-points the
// controller ownerReference.
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
	return before.UID != after.UID || before.Kind != after.Kind || before.Name != after.Name
}
