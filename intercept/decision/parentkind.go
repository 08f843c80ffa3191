package decision

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// WatchesParentKind says whether d, decided under parent, is a reason to
// make parent's kind one the proxy watches: every object of it cached, and
// its settledness learned from each change and recorded. That costs memory
// and CPU for every object of the kind in the cluster, and a settledness
// record for each, so it must follow from a write whose verdict rests on
// the parent's settledness:
//   - the parent's controller, as recorded from its status writes or told
//     from managedFields;
//   - or a writer under a parent that carries allowances, whose
//     consumption waits on the parent settling.
//
// None of these is proof on its own, so the kind is watched only once the
// writer is also shown to be allowed to write the status of the kind's
// objects in the parent's namespace, as a controller of them is (the
// caller asks the authorizer). Any caller can send the field manager that
// owns a parent's observedGeneration, and name a Pod, a ConfigMap or most
// any object of its namespace as the controller of its own object. Only
// the proxy writes the controllers record and allowances through itself,
// but anyone who may write the parent at kube-apiserver directly can
// write them there, naming itself.
//
// Writes under a parent of another kind are decided as before, on the
// parent read live and on what its settledness says now; only the history
// between writes (a parent that settled and then became unready) is not
// watched for them.
func WatchesParentKind(d *Decision, parent *unstructured.Unstructured) bool {
	if d == nil || parent == nil || parent.GetUID() == "" {
		return false
	}
	if d.Actor.IsController && (d.Actor.Method == controllerid.MethodStatusWriters || d.Actor.Method == controllerid.MethodManagedFields) {
		return true
	}
	held, _, _ := unstructured.NestedString(parent.Object, "metadata", "annotations", annotations.Allowances)
	return held != ""
}
