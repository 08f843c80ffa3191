package decision

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// ParentKindWatch says whether a decision makes its parent's kind one the
// proxy watches: every object of it cached, and its settledness learned
// from each change and recorded.
type ParentKindWatch int

// Parent kind watches.
const (
	// NoWatch: the write gives no reason to watch the kind.
	NoWatch ParentKindWatch = iota
	// Watch: the kind is watched.
	Watch
	// WatchIfStatusWriter: the kind is watched if the writer may write
	// the parent's status, which the authorizer is asked.
	WatchIfStatusWriter
)

// WatchesParentKind says whether d, decided under parent, makes parent's
// kind one the proxy watches. That costs memory and CPU for every object
// of the kind in the cluster, and a settledness record for each, so it
// must follow from a write whose verdict rests on the parent's
// settledness, by someone who could not have been just anyone:
//   - the parent's controller as recorded from its status writes, which
//     only a caller who may write the status of an object of that kind
//     makes;
//   - the parent's controller told from managedFields, if it may write the
//     parent's status: any caller can send the field manager that owns a
//     parent's observedGeneration, and name a Pod, a ConfigMap or most any
//     object of its namespace as the controller of its own object;
//   - or a writer under a parent that carries allowances (whose
//     consumption waits on the parent settling), if it may write the
//     parent's status: only the proxy writes allowances through itself,
//     but anyone who may write the parent at kube-apiserver directly can.
//
// Writes under a parent of another kind are decided as before, on the
// parent read live and on what its settledness says now; only the history
// between writes (a parent that settled and then became unready) is not
// watched for them.
func WatchesParentKind(d *Decision, parent *unstructured.Unstructured) ParentKindWatch {
	if d == nil || parent == nil || parent.GetUID() == "" {
		return NoWatch
	}
	switch {
	case d.Actor.IsController && d.Actor.Method == controllerid.MethodStatusWriters:
		return Watch
	case d.Actor.IsController && d.Actor.Method == controllerid.MethodManagedFields:
		return WatchIfStatusWriter
	}
	if held, _, _ := unstructured.NestedString(parent.Object, "metadata", "annotations", annotations.Allowances); held != "" {
		// Only the proxy writes allowances through itself; whoever may
		// write the parent at kube-apiserver directly may write them too.
		return WatchIfStatusWriter
	}
	return NoWatch
}
