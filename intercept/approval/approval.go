// Package approval decides whether a drifting child write is approved or
// rejected by the parent's kausality.io/approvals and kausality.io/rejections
// annotations, prunes stale approvals and consumes once-approvals.
//
// Rules (the Kausality design's "Approval Validity" and "Pruning Rules"):
//   - rejections are checked first and win;
//   - a rejection without generation is always active, with generation only
//     while parent.generation equals it;
//   - once: valid while approval.generation == parent.generation and not yet
//     consumed; generation: valid while equal; always: always valid;
//   - when the parent generation moved on, once and generation approvals
//     with generation < parent.generation are pruned; always is never pruned.
package approval

import (
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// Approval is an entry of kausality.io/approvals.
type Approval = annotations.Approval

// Rejection is an entry of kausality.io/rejections.
type Rejection = annotations.Rejection

// Mode is an approval mode.
type Mode = annotations.ApprovalMode

// Approval modes.
const (
	Once       = annotations.ApprovalOnce
	Generation = annotations.ApprovalGeneration
	Always     = annotations.ApprovalAlways
)

// Child identifies the child being written (its namespace is the parent's).
type Child struct {
	APIVersion string
	Kind       string
	Name       string
}

func matchField(pattern, value string) bool { return pattern == "*" || pattern == value }

// MatchesApproval reports whether a matches child ("*" is a wildcard).
func MatchesApproval(a Approval, c Child) bool {
	return matchField(a.APIVersion, c.APIVersion) && matchField(a.Kind, c.Kind) && matchField(a.Name, c.Name)
}

// MatchesRejection reports whether r matches child ("*" is a wildcard).
func MatchesRejection(r Rejection, c Child) bool {
	return matchField(r.APIVersion, c.APIVersion) && matchField(r.Kind, c.Kind) && matchField(r.Name, c.Name)
}

// Valid reports whether a is valid at the parent generation.
func Valid(a Approval, parentGeneration int64) bool {
	switch a.EffectiveMode() {
	case Always:
		return true
	case Once, Generation:
		return a.Generation == parentGeneration
	}
	return false
}

// Stale reports whether a must be pruned at the parent generation: once and
// generation approvals for an older generation.
func Stale(a Approval, parentGeneration int64) bool {
	switch a.EffectiveMode() {
	case Once, Generation:
		return a.Generation < parentGeneration
	}
	return false
}

// ActiveRejection reports whether r applies at the parent generation.
func ActiveRejection(r Rejection, parentGeneration int64) bool {
	return r.Generation == 0 || r.Generation == parentGeneration
}

// FindRejection returns the first active rejection matching child.
func FindRejection(list []Rejection, c Child, parentGeneration int64) (Rejection, bool) {
	for _, r := range list {
		if MatchesRejection(r, c) && ActiveRejection(r, parentGeneration) {
			return r, true
		}
	}
	return Rejection{}, false
}

// FindApproval returns the index of the valid approval matching child, or
// -1. When several match, one that needs no consumption is preferred
// (always, then generation, then once), so a once approval is kept for when
// it is the only one left.
func FindApproval(list []Approval, c Child, parentGeneration int64) int {
	best, bestRank := -1, 0
	for i, a := range list {
		if !MatchesApproval(a, c) || !Valid(a, parentGeneration) {
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

// Prune drops stale approvals. kept aliases a new slice; list is unchanged.
func Prune(list []Approval, parentGeneration int64) (kept, pruned []Approval) {
	for _, a := range list {
		if Stale(a, parentGeneration) {
			pruned = append(pruned, a)
		} else {
			kept = append(kept, a)
		}
	}
	return kept, pruned
}

// Consume removes the entry at index used (a once approval) from list and
// prunes stale entries. It returns the new kausality.io/approvals value (""
// means remove the annotation) and the pruned entries.
func Consume(list []Approval, used int, parentGeneration int64) (value string, pruned []Approval) {
	rest := make([]Approval, 0, len(list))
	for i, a := range list {
		if i == used {
			continue
		}
		rest = append(rest, a)
	}
	kept, pruned := Prune(rest, parentGeneration)
	return annotations.EncodeApprovals(kept), pruned
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
func Evaluate(approvals []Approval, rejections []Rejection, rejectionsMalformed bool, c Child, parentGeneration int64) Evaluation {
	var ev Evaluation
	switch {
	case rejectionsMalformed:
		ev.Outcome = Rejected
		ev.RejectionsMalformed = true
		ev.Rejection = &Rejection{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name,
			Reason: "the parent's " + annotations.Rejections + " annotation is malformed; every child counts as rejected until it is fixed"}
	default:
		if r, ok := FindRejection(rejections, c, parentGeneration); ok {
			ev.Outcome = Rejected
			ev.Rejection = &r
		}
	}

	idx := -1
	if ev.Outcome != Rejected {
		idx = FindApproval(approvals, c, parentGeneration)
	}
	if idx >= 0 {
		a := approvals[idx]
		ev.Outcome = Approved
		ev.Approval = &a
		ev.Consume = a.EffectiveMode() == Once
	}
	if ev.Consume {
		ev.NewApprovals, ev.Pruned = Consume(approvals, idx, parentGeneration)
		ev.ApprovalsChanged = true
	} else {
		kept, pruned := Prune(approvals, parentGeneration)
		if len(pruned) > 0 {
			ev.NewApprovals, ev.Pruned, ev.ApprovalsChanged = annotations.EncodeApprovals(kept), pruned, true
		}
	}
	return ev
}

// PruneValue parses an approvals annotation value and returns the pruned
// value when something is stale. Malformed values are left alone.
func PruneValue(value string, parentGeneration int64) (newValue string, pruned []Approval, changed bool) {
	list, warnings := annotations.ParseApprovals(value)
	if len(warnings) > 0 {
		return value, nil, false
	}
	kept, pruned := Prune(list, parentGeneration)
	if len(pruned) == 0 {
		return value, nil, false
	}
	return annotations.EncodeApprovals(kept), pruned, true
}

// SuggestedGeneration is the generation a generation-bound approval added
// now should carry. Writing an annotation to a Deployment (apps or
// extensions) bumps its generation, so the approval must name the next one.
func SuggestedGeneration(parentAPIVersion, parentKind string, parentGeneration int64) int64 {
	if parentKind == "Deployment" && (parentAPIVersion == "apps/v1" || hasGroup(parentAPIVersion, "apps") || hasGroup(parentAPIVersion, "extensions")) {
		return parentGeneration + 1
	}
	return parentGeneration
}

func hasGroup(apiVersion, group string) bool {
	return len(apiVersion) > len(group) && apiVersion[:len(group)] == group && apiVersion[len(group)] == '/'
}

// Suggest returns the once approval that would unblock child, and the full
// approvals annotation value with it added to the currently valid
// (non-stale) approvals.
func Suggest(current []Approval, c Child, parentAPIVersion, parentKind string, parentGeneration int64) (Approval, string) {
	a := Approval{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name,
		Generation: SuggestedGeneration(parentAPIVersion, parentKind, parentGeneration), Mode: Once}
	kept, _ := Prune(current, parentGeneration)
	all := append(append(make([]Approval, 0, len(kept)+1), kept...), a)
	return a, annotations.EncodeApprovals(all)
}
