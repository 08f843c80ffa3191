// Package approval decides whether a drifting child write is approved or
// rejected by the parent's kausality.io/approvals and kausality.io/rejections
// annotations, prunes stale approvals and consumes once-approvals.
//
// Rules (the Kausality design's "Approval Validity" and "Pruning Rules"),
// with one refinement: a generation names the parent's spec, not the
// number alone. Kinds such as Deployment bump generation when only their
// annotations change, and writing an approval is such a change; the
// generations over which the parent kept its current spec form a Window,
// and an approval for any of them is for the current spec.
//   - rejections are checked first and win;
//   - a rejection without generation is always active, with generation only
//     while it is in the window;
//   - once: valid while its generation is in the window and not yet
//     consumed; generation: valid while in the window; always: always valid;
//   - when the spec moved on, once and generation approvals for an older
//     generation are pruned; always is never pruned.
package approval

import (
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// Approval is an entry of kausality.io/approvals.
type Approval = annotations.Approval

// Rejection is an entry of kausality.io/rejections.
type Rejection = annotations.Rejection

// Entry is an entry of kausality.io/approvals as written: rewrites keep
// every entry they do not remove exactly as written, including entries the
// proxy cannot read.
type Entry = annotations.ApprovalEntry

// Mode is an approval mode.
type Mode = annotations.ApprovalMode

// Approval modes.
const (
	Once       = annotations.ApprovalOnce
	Generation = annotations.ApprovalGeneration
	Always     = annotations.ApprovalAlways
)

// Child identifies the child being written. Namespace is set only for a
// namespaced child of a cluster-scoped parent (ChildOf): a namespaced
// parent's children are all in its own namespace.
type Child struct {
	APIVersion string
	Kind       string
	Name       string
	Namespace  string
}

// ChildOf is the Child of an object of apiVersion and kind named name in
// namespace, under a parent in parentNamespace ("" for a cluster-scoped
// parent, whose children may be in any namespace).
func ChildOf(apiVersion, kind, namespace, name, parentNamespace string) Child {
	c := Child{APIVersion: apiVersion, Kind: kind, Name: name}
	if parentNamespace == "" {
		c.Namespace = namespace
	}
	return c
}

func matchField(pattern, value string) bool { return pattern == "*" || pattern == value }

// matchNamespace: an entry without namespace matches a child in any.
func matchNamespace(pattern, value string) bool { return pattern == "" || matchField(pattern, value) }

// MatchesApproval reports whether a matches child ("*" is a wildcard).
func MatchesApproval(a Approval, c Child) bool {
	return matchField(a.APIVersion, c.APIVersion) && matchField(a.Kind, c.Kind) && matchField(a.Name, c.Name) &&
		matchNamespace(a.Namespace, c.Namespace)
}

// MatchesRejection reports whether r matches child ("*" is a wildcard).
func MatchesRejection(r Rejection, c Child) bool {
	return matchField(r.APIVersion, c.APIVersion) && matchField(r.Kind, c.Kind) && matchField(r.Name, c.Name) &&
		matchNamespace(r.Namespace, c.Namespace)
}

// Window is the range of parent generations, From to To inclusive, over
// which the parent has had its current spec. To is the parent's
// generation.
type Window struct {
	From, To int64
}

// At is the window of a parent known only at generation g.
func At(g int64) Window { return Window{From: g, To: g} }

// Contains reports whether g is in the window.
func (w Window) Contains(g int64) bool {
	from := w.From
	if from <= 0 || from > w.To {
		from = w.To
	}
	return g >= from && g <= w.To
}

// from is the first generation of the window.
func (w Window) from() int64 {
	if w.From <= 0 || w.From > w.To {
		return w.To
	}
	return w.From
}

// Valid reports whether a is valid for the parent's current spec.
func Valid(a Approval, w Window) bool {
	switch a.EffectiveMode() {
	case Always:
		return true
	case Once, Generation:
		return w.Contains(a.Generation)
	}
	return false
}

// Stale reports whether a must be pruned: once and generation approvals for
// a spec older than the current one.
func Stale(a Approval, w Window) bool {
	switch a.EffectiveMode() {
	case Once, Generation:
		return a.Generation < w.from()
	}
	return false
}

// ActiveRejection reports whether r applies to the parent's current spec.
func ActiveRejection(r Rejection, w Window) bool {
	return r.Generation == 0 || w.Contains(r.Generation)
}

// FindRejection returns the first active rejection matching child.
func FindRejection(list []Rejection, c Child, w Window) (Rejection, bool) {
	for _, r := range list {
		if MatchesRejection(r, c) && ActiveRejection(r, w) {
			return r, true
		}
	}
	return Rejection{}, false
}

// FindApproval returns the index of the valid approval matching child, or
// -1; entries the proxy cannot read never match. When several match, one
// that needs no consumption is preferred (always, then generation, then
// once), so a once approval is kept for when it is the only one left.
func FindApproval(list []Entry, c Child, w Window) int {
	best, bestRank := -1, 0
	for i, e := range list {
		a := e.Approval
		if !e.Valid || !MatchesApproval(a, c) || !Valid(a, w) {
			continue
		}
		rank := 1
		switch a.EffectiveMode() {
		case Always:
			rank = 3
		case Generation:
			rank = 2
		}
		if rank > bestRank {
			best, bestRank = i, rank
		}
	}
	return best
}

// Prune drops stale approvals. Entries the proxy cannot read are kept: it
// cannot tell whether they are stale. kept is a new slice; list is
// unchanged.
func Prune(list []Entry, w Window) (kept []Entry, pruned []Approval) {
	for _, e := range list {
		if e.Valid && Stale(e.Approval, w) {
			pruned = append(pruned, e.Approval)
		} else {
			kept = append(kept, e)
		}
	}
	return kept, pruned
}

// Consume removes the entry at index used (a once approval) from list and
// prunes stale entries. It returns the new kausality.io/approvals value (""
// means remove the annotation), every other entry as written, and the
// pruned entries.
func Consume(list []Entry, used int, w Window) (value string, pruned []Approval) {
	rest := make([]Entry, 0, len(list))
	for i, e := range list {
		if i == used {
			continue
		}
		rest = append(rest, e)
	}
	kept, pruned := Prune(rest, w)
	return annotations.EncodeApprovalEntries(kept), pruned
}

// Outcome is the result of Evaluate.
type Outcome int

// Outcomes.
const (
	// NotApproved: no rejection and no valid approval matches.
	NotApproved Outcome = iota
	// Approved by Evaluation.Approval.
	Approved
	// Rejected by Evaluation.Rejection (or malformed rejections).
	Rejected
)

// Evaluation is what the parent's annotations say about a drifting child.
type Evaluation struct {
	Outcome Outcome
	// Rejection is set when Rejected. For malformed rejections it is a
	// synthetic entry whose Reason explains that.
	Rejection *Rejection
	// RejectionsMalformed: rejected because kausality.io/rejections was
	// broken.
	RejectionsMalformed bool
	// Approval is set when Approved.
	Approval *Approval
	// ApprovalRaw is the approving entry as written, so that a consumed
	// once approval can be put back as it was.
	ApprovalRaw []byte
	// Consume: the approval is a once approval and must be consumed.
	Consume bool
	// ApprovalsChanged: the approvals annotation must be rewritten to
	// NewApprovals (consumption and/or pruning).
	ApprovalsChanged bool
	// NewApprovals is the new annotation value ("" = remove).
	NewApprovals string
	// Pruned lists the stale approvals removed.
	Pruned []Approval
}

// Evaluate applies rejections (first), then approvals, to child at the
// parent generation. rejectionsMalformed makes every child rejected.
// Pruning is always computed; it only happens if the write goes through.
func Evaluate(approvals []Entry, rejections []Rejection, rejectionsMalformed bool, c Child, w Window) Evaluation {
	var ev Evaluation
	switch {
	case rejectionsMalformed:
		ev.Outcome = Rejected
		ev.RejectionsMalformed = true
		ev.Rejection = &Rejection{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, Namespace: c.Namespace,
			Reason: "the parent's " + annotations.Rejections + " annotation is malformed; every child counts as rejected until it is fixed"}
	default:
		if r, ok := FindRejection(rejections, c, w); ok {
			ev.Outcome = Rejected
			ev.Rejection = &r
		}
	}

	idx := -1
	if ev.Outcome != Rejected {
		idx = FindApproval(approvals, c, w)
	}
	if idx >= 0 && idx < len(approvals) {
		a := approvals[idx].Approval
		ev.Outcome = Approved
		ev.Approval, ev.ApprovalRaw = &a, approvals[idx].Raw
		ev.Consume = a.EffectiveMode() == Once
	}
	if ev.Consume {
		ev.NewApprovals, ev.Pruned = Consume(approvals, idx, w)
		ev.ApprovalsChanged = true
	} else {
		kept, pruned := Prune(approvals, w)
		if len(pruned) > 0 {
			ev.NewApprovals, ev.Pruned, ev.ApprovalsChanged = annotations.EncodeApprovalEntries(kept), pruned, true
		}
	}
	return ev
}

// PruneValue parses an approvals annotation value and returns the pruned
// value when something is stale; every other entry stays as written. A
// value that is not a JSON array is left alone.
func PruneValue(value string, w Window) (newValue string, pruned []Approval, changed bool) {
	list, _, ok := annotations.ParseApprovalEntries(value)
	if !ok {
		return value, nil, false
	}
	kept, pruned := Prune(list, w)
	if len(pruned) == 0 {
		return value, nil, false
	}
	return annotations.EncodeApprovalEntries(kept), pruned, true
}

// Suggest returns the once approval that would unblock child, and the full
// approvals annotation value with it added to the currently valid
// (non-stale) entries, as written. It names the parent's generation now:
// the bump that writing it causes on some kinds stays in the window.
func Suggest(current []Entry, c Child, w Window) (Approval, string) {
	a := Approval{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, Namespace: c.Namespace, Generation: w.To, Mode: Once}
	kept, _ := Prune(current, w)
	all := append(append(make([]Entry, 0, len(kept)+1), kept...), annotations.NewApprovalEntry(a))
	return a, annotations.EncodeApprovalEntries(all)
}
