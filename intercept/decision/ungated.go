package decision

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// UngatedKind is a kind of child that controllers make again by design, on
// a timer or after a failure (a Pod a node drain evicted, a CronJob's next
// Job, a renewed certificate): their writes of it under a settled parent
// are traced but not gated (SelfHealing), so enforce mode cannot hold them
// back. Parent, when its Kind is set, narrows the entry to the children of
// parents of that kind: a Secret is an attempt under a cert-manager
// Certificate, which renews it, and a child like any other elsewhere.
type UngatedKind struct {
	Child  schema.GroupKind
	Parent schema.GroupKind
}

// Ungates reports whether k leaves a child of kind child under a parent of
// kind parent ungated.
func (k UngatedKind) Ungates(child, parent schema.GroupKind) bool {
	return k.Child == child && (k.Parent.Kind == "" || k.Parent == parent)
}

// String renders "Pod", "Job.batch", or "Secret under Certificate.cert-manager.io".
func (k UngatedKind) String() string {
	out := k.Child.String()
	if k.Parent.Kind != "" {
		out += " under " + k.Parent.String()
	}
	return out
}

// UngatedBy returns the first of kinds that leaves a child of kind child
// under a parent of kind parent ungated.
func UngatedBy(kinds []UngatedKind, child, parent schema.GroupKind) (UngatedKind, bool) {
	for _, k := range kinds {
		if k.Ungates(child, parent) {
			return k, true
		}
	}
	return UngatedKind{}, false
}

// GroupKindOf is the group and kind of apiVersion and kind.
func GroupKindOf(apiVersion, kind string) schema.GroupKind {
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		group = ""
	}
	return schema.GroupKind{Group: group, Kind: kind}
}
