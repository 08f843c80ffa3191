package decision

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// WatchesParentKind reports whether d, decided under parent, makes
// parent's kind one the proxy watches: every object of it cached, and its
// settledness learned from each change. That costs memory and CPU for
// every object of the kind in the cluster, so it must follow from a write
// whose verdict rests on the parent's settledness, made by someone no
// caller can pass for:
//   - the parent's controller as recorded from its status writes, which
//     only a caller who may write the status of an object of that kind
//     makes. Not a controller told from managedFields: any caller can send
//     the field manager that owns a parent's observedGeneration, and name
//     a Pod, a ConfigMap or any kind as the controller of its own object;
//   - or a parent that carries allowances, which only the proxy writes,
//     for a change that an AllowancePolicy lets someone start, and whose
//     consumption waits on the parent settling.
//
// Writes under a parent of another kind are decided as before, on the
// parent read live and on what its settledness says now; only the history
// between writes (a parent that settled and then became unready) is not
// watched for them.
func WatchesParentKind(d *Decision, parent *unstructured.Unstructured) bool {
	if d == nil || parent == nil || parent.GetUID() == "" {
		return false
	}
	if d.Actor.IsController && d.Actor.Method == controllerid.MethodStatusWriters {
		return true
	}
	held, _, _ := unstructured.NestedString(parent.Object, "metadata", "annotations", annotations.Allowances)
	return held != ""
}
