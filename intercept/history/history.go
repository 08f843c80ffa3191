// Package history tells a workload controller's pruning of its revision
// history from drift.
//
// The deployment controller deletes the oldest ReplicaSets of a Deployment
// beyond spec.revisionHistoryLimit once they are scaled to zero; the
// StatefulSet and DaemonSet controllers delete the oldest ControllerRevisions
// no pod runs beyond theirs. Both happen right after a rollout completes,
// when the parent has settled at its spec, so by timing alone they look like
// drift. They are the controller carrying out revisionHistoryLimit, which is
// spec, and are told apart here by the same rule the controllers apply: the
// child is among the oldest retired revisions that exceed the limit.
//
// Pure: the caller lists the parent's owned revisions (from a cache) and
// hands them in.
package history

import (
	"sort"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultLimit is revisionHistoryLimit when the parent does not set it
// (the apps/v1 default for all three kinds).
const DefaultLimit = 10

// RevisionAnnotation is where the deployment controller numbers a
// Deployment's revisions, on the Deployment and on each ReplicaSet.
const RevisionAnnotation = "deployment.kubernetes.io/revision"

var (
	replicaSet         = schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}
	controllerRevision = schema.GroupKind{Group: "apps", Kind: "ControllerRevision"}
	deployment         = schema.GroupKind{Group: "apps", Kind: "Deployment"}
	statefulSet        = schema.GroupKind{Group: "apps", Kind: "StatefulSet"}
	daemonSet          = schema.GroupKind{Group: "apps", Kind: "DaemonSet"}
)

// RevisionHashLabel is the label by which a StatefulSet's or DaemonSet's
// pod names the revision it runs: the ControllerRevision's name (a
// StatefulSet's pods), or the same label on the ControllerRevision (a
// DaemonSet's).
const RevisionHashLabel = "controller-revision-hash"

// Revision is one revision the parent owns, as its controller ranks it.
type Revision struct {
	Name string
	// Number is the revision number: the ReplicaSet's revision annotation,
	// or a ControllerRevision's revision field.
	Number   int64
	Created  time.Time
	Deleting bool
	// Hash is a ControllerRevision's RevisionHashLabel.
	Hash string
	// Running: a pod of the parent runs the revision (MarkRunning). The
	// StatefulSet and DaemonSet controllers never delete such a revision,
	// whatever the limit: with updateStrategy OnDelete, pods run old
	// revisions until someone deletes them.
	Running bool
}

// RunByPods reports whether the revisions of the child kind are run by
// the parent's pods, which MarkRunning must then be told of.
func RunByPods(child schema.GroupKind) bool { return child == controllerRevision }

// MarkRunning marks the revisions the parent's pods run, by the
// RevisionHashLabel values of those pods.
func MarkRunning(revs []Revision, podHashes map[string]bool) {
	for i := range revs {
		revs[i].Running = podHashes[revs[i].Name] || revs[i].Hash != "" && podHashes[revs[i].Hash]
	}
}

// Kept reports whether the history of the child kind under the parent
// kind is something this package can judge, so that the caller lists the
// revisions only then.
func Kept(parent, child schema.GroupKind) bool {
	switch child {
	case replicaSet:
		return parent == deployment
	case controllerRevision:
		return parent == statefulSet || parent == daemonSet
	}
	return false
}

// RevisionInMetadata reports whether RevisionOf reads only the metadata of
// objects of kind gk (a ReplicaSet's revision is an annotation; a
// ControllerRevision's is a field of its own).
func RevisionInMetadata(gk schema.GroupKind) bool { return gk == replicaSet }

// RevisionOf reads obj as a Revision of its kind; ok is false for objects
// that carry no revision number.
func RevisionOf(obj *unstructured.Unstructured) (Revision, bool) {
	r := Revision{Name: obj.GetName(), Created: obj.GetCreationTimestamp().Time, Deleting: obj.GetDeletionTimestamp() != nil}
	switch obj.GroupVersionKind().GroupKind() {
	case replicaSet:
		// The deployment controller counts a ReplicaSet without the
		// annotation (one it adopted) as revision 0, the oldest.
		v, annotated := obj.GetAnnotations()[RevisionAnnotation]
		if !annotated {
			break
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return r, false
		}
		r.Number = n
	case controllerRevision:
		n, found, err := unstructured.NestedInt64(obj.Object, "revision")
		if err != nil || !found {
			return r, false
		}
		r.Number, r.Hash = n, obj.GetLabels()[RevisionHashLabel]
	default:
		return r, false
	}
	return r, true
}

// Pruning reports whether deleting child is its parent's controller
// pruning revision history the parent's spec no longer keeps. owned are
// the revisions of the child's kind that the parent controls, child
// included. reason says why when it is.
func Pruning(parent, child *unstructured.Unstructured, owned []Revision) (bool, string) {
	if parent == nil || child == nil || !Kept(parent.GroupVersionKind().GroupKind(), child.GroupVersionKind().GroupKind()) {
		return false, ""
	}
	self, ok := RevisionOf(child)
	if !ok || self.Deleting {
		return false, ""
	}
	limit := DefaultLimit
	if l, found, err := unstructured.NestedInt64(parent.Object, "spec", "revisionHistoryLimit"); err == nil && found && l >= 0 {
		limit = int(l)
	}
	live := liveRevisions(parent, owned)
	if live[self.Name] {
		return false, ""
	}
	if child.GroupVersionKind().GroupKind() == replicaSet && !scaledDown(child) {
		return false, ""
	}
	var retired []Revision
	for _, r := range owned {
		if !live[r.Name] && !r.Deleting {
			retired = append(retired, r)
		}
	}
	if !contains(retired, self.Name) {
		retired = append(retired, self)
	}
	sort.SliceStable(retired, func(i, j int) bool {
		if retired[i].Number != retired[j].Number {
			return retired[i].Number < retired[j].Number
		}
		return retired[i].Created.Before(retired[j].Created)
	})
	excess := len(retired) - limit
	for i := 0; i < excess; i++ {
		if retired[i].Name == self.Name {
			return true, "revision " + strconv.FormatInt(self.Number, 10) + " is one of the " + strconv.Itoa(excess) +
				" oldest of " + strconv.Itoa(len(retired)) + " retired revisions beyond revisionHistoryLimit " + strconv.Itoa(limit)
		}
	}
	return false, ""
}

// liveRevisions are the revisions the parent still runs: a Deployment's
// current ReplicaSet (its revision number is the Deployment's), a
// StatefulSet's current and update revisions, those its or a DaemonSet's
// pods run, and for every kind the newest revision, which is the one the parent's template matches (a
// rollback renumbers the revision it returns to as the newest).
func liveRevisions(parent *unstructured.Unstructured, owned []Revision) map[string]bool {
	live := map[string]bool{}
	newest := Revision{Number: -1}
	for _, r := range owned {
		if r.Number > newest.Number {
			newest = r
		}
	}
	if newest.Name != "" {
		live[newest.Name] = true
	}
	for _, r := range owned {
		if r.Running {
			live[r.Name] = true
		}
	}
	if current, err := strconv.ParseInt(parent.GetAnnotations()[RevisionAnnotation], 10, 64); err == nil {
		for _, r := range owned {
			if r.Number == current {
				live[r.Name] = true
			}
		}
	}
	for _, field := range []string{"currentRevision", "updateRevision"} {
		if name, _, _ := unstructured.NestedString(parent.Object, "status", field); name != "" {
			live[name] = true
		}
	}
	return live
}

// scaledDown: the deployment controller deletes only ReplicaSets with no
// replicas wanted or running, whose status has caught up with their spec.
func scaledDown(rs *unstructured.Unstructured) bool {
	spec, found, err := unstructured.NestedInt64(rs.Object, "spec", "replicas")
	if err != nil || !found || spec != 0 {
		return false
	}
	status, _, err := unstructured.NestedInt64(rs.Object, "status", "replicas")
	if err != nil || status != 0 {
		return false
	}
	observed, _, _ := unstructured.NestedInt64(rs.Object, "status", "observedGeneration")
	return rs.GetGeneration() <= observed
}

func contains(revs []Revision, name string) bool {
	for _, r := range revs {
		if r.Name == name {
			return true
		}
	}
	return false
}
