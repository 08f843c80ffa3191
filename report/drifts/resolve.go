package drifts

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// Observed is what the sender read about a record's objects.
type Observed struct {
	// Parent as stored now; nil when it does not exist.
	Parent *unstructured.Unstructured
	// Child as stored now; nil when it does not exist.
	Child *unstructured.Unstructured
	// Superseded: a newer drift of the same pair is recorded.
	Superseded bool
	// Now is when the objects were read.
	Now time.Time
	// CreateGrace: how long after detection the child of a denied
	// create may still come into being.
	CreateGrace time.Duration
}

// Resolve says whether, and why, the drift of r has ended. It is pure: the
// sender gathers the facts, this decides.
//
// A drift ends when what made it drift is gone: the child or the parent
// was deleted (or replaced by an object of the same name), a denied create
// was not made after all, the parent's
// spec changed (the controller's write is now the expected reconciliation
// of a new spec), an approval now admits the write (unless the write also
// mutated what no allowance covers), or a newer drift of the pair replaced
// it. A rejection does not end it: the write stays
// blocked, and people still need to know.
func Resolve(r *Record, o Observed) (string, bool) {
	sp := &r.Report.Spec
	if o.Parent == nil || (sp.Parent.UID != "" && string(o.Parent.GetUID()) != sp.Parent.UID) {
		return ReasonParentDeleted, true
	}
	if sp.Child.UID != "" && (o.Child == nil || string(o.Child.GetUID()) != sp.Child.UID) {
		return v1alpha1.ReasonChildDeleted, true
	}
	if neverCreated(r, o) {
		return ReasonNotCreated, true
	}
	if o.Parent.GetDeletionTimestamp() != nil {
		return ReasonParentDeleted, true
	}
	if parentSpecChanged(r, o.Parent) {
		return v1alpha1.ReasonParentChanged, true
	}
	// An approval admits drift, never a mutation no allowance covers: a
	// record of one stays open until the parent changes.
	if r.Report.Spec.Allowances == nil && approved(r, o.Parent) {
		return v1alpha1.ReasonApproved, true
	}
	if o.Superseded {
		return ReasonSuperseded, true
	}
	return "", false
}

// neverCreated: the drift is a create that was denied, and its child still
// does not exist a grace period later. The controller has given up or
// moved on to another name; a controller that keeps retrying records the
// drift again, within its rate limit. Without this, every denied create
// under a new name would hold a record until the parent changed.
func neverCreated(r *Record, o Observed) bool {
	sp := &r.Report.Spec
	return sp.Request.Operation == string(decision.Create) && sp.Child.UID == "" && o.Child == nil &&
		!o.Now.Before(r.State.DetectedAt.Add(o.CreateGrace))
}

// parentSpecChanged: the parent's spec is no longer the one the drift was
// detected under. Generation alone cannot tell: some kinds bump it when
// only annotations change, and adding an approval is such a change.
func parentSpecChanged(r *Record, parent *unstructured.Unstructured) bool {
	if h := r.State.ParentSpecHash; h != "" {
		return settle.SpecHash(parent) != h
	}
	return parent.GetGeneration() > r.Report.Spec.Parent.Generation
}

// approved: an approval on the parent admits the drifted write at the
// parent's current spec. The spec has not changed since detection (that
// is checked first), so the generations from detection to now all name
// the same spec.
func approved(r *Record, parent *unstructured.Unstructured) bool {
	list, _ := annotations.ParseApprovals(parent.GetAnnotations()[annotations.Approvals])
	child := approval.Child{APIVersion: r.Report.Spec.Child.APIVersion, Kind: r.Report.Spec.Child.Kind, Name: r.Report.Spec.Child.Name}
	window := approval.Window{From: r.Report.Spec.Parent.Generation, To: parent.GetGeneration()}
	for _, a := range list {
		if approval.MatchesApproval(a, child) && approval.Valid(a, window) {
			return true
		}
	}
	return false
}

// snoozedUntil returns when the parent's snooze ends, if it is snoozed at
// now.
func snoozedUntil(parent *unstructured.Unstructured, now time.Time) (time.Time, bool) {
	if parent == nil {
		return time.Time{}, false
	}
	s, _ := annotations.ParseSnooze(parent.GetAnnotations())
	if s == nil || !s.ActiveAt(now) {
		return time.Time{}, false
	}
	return s.Until, true
}
