package decision

// The write path's policies that are not about one write's verdict: what
// to do when a fact cannot be established, which verdicts must be
// confirmed against kube-apiserver, and what to do when reserving a once
// approval fails. They are here, pure, so the orchestration only carries
// them out.

// FailurePolicy is --failure-policy: what happens to a write when a fact
// the decision needs (the kind, the stored object, the parent) cannot be
// read.
type FailurePolicy string

// Failure policies.
const (
	FailurePolicyFail   FailurePolicy = "Fail"
	FailurePolicyIgnore FailurePolicy = "Ignore"
)

// FailureKind says why a fact could not be read.
type FailureKind int

// Failure kinds.
const (
	// Unreachable: kube-apiserver could not be reached or answered 503; a
	// retry may succeed.
	Unreachable FailureKind = iota
	// Unreadable: kube-apiserver answered, but the fact cannot be had (an
	// unmappable kind, a read the proxy may not make).
	Unreadable
)

// FailureAction is what to do with a write whose facts are incomplete.
type FailureAction struct {
	// Forward: let the write through undecided, with a warning.
	Forward bool
	// Code is the status of the refusal when not forwarded: 503 (retry) or
	// 500.
	Code int
}

// OnFailure applies the failure policy.
func OnFailure(policy FailurePolicy, kind FailureKind) FailureAction {
	switch {
	case policy == FailurePolicyIgnore:
		return FailureAction{Forward: true}
	case kind == Unreachable:
		return FailureAction{Code: 503}
	default:
		return FailureAction{Code: 500}
	}
}

// NeedsConfirmation reports whether d must be decided again from a live
// read of the parent before it is acted on. The controller reacts to the
// same watch event as the proxy's cache, and a cache a beat behind shows
// the parent settled when its spec has just changed: a drift verdict from
// the cache is confirmed. Other verdicts allow the write whatever the
// parent's latest state, so they cost no extra round trip.
func NeedsConfirmation(d *Decision, parentFromCache bool) bool {
	return d.Drift && parentFromCache
}

// ReservationError says how reserving a once approval on the parent failed.
type ReservationError int

// Reservation errors.
const (
	// ReservationConflict: the parent changed since it was read (maybe
	// another write took the approval).
	ReservationConflict ReservationError = iota
	// ReservationParentGone: the parent no longer exists.
	ReservationParentGone
	// ReservationFailed: anything else (the proxy may not write the
	// parent, kube-apiserver is down).
	ReservationFailed
)

// ReservationAction is what to do after a failed reservation.
type ReservationAction int

// Reservation actions.
const (
	// DecideAgain from a fresh read of the parent.
	DecideAgain ReservationAction = iota
	// RefuseRetryable: answer 409, the client retries the write.
	RefuseRetryable
	// RefuseAsFailure: the failure policy applies; a retry would meet the
	// same error, so it is not a conflict.
	RefuseAsFailure
)

// OnReservationError decides what follows a failed reservation at attempt
// (1-based) of at most maxAttempts.
func OnReservationError(e ReservationError, attempt, maxAttempts int) ReservationAction {
	switch {
	case e == ReservationFailed:
		return RefuseAsFailure
	case attempt >= maxAttempts:
		return RefuseRetryable
	default:
		// A conflict, or a parent deleted meanwhile (its children are then
		// cleanup): the fresh snapshot decides.
		return DecideAgain
	}
}

// ReservedApprovalAction is what becomes of a reserved once approval when
// kube-apiserver has answered the write it was reserved for.
type ReservedApprovalAction int

// Reserved approval actions.
const (
	// ApprovalUsed: the write was applied; the approval is spent.
	ApprovalUsed ReservedApprovalAction = iota
	// ApprovalRestore: kube-apiserver refused the write, so nothing was
	// stored; the approval goes back.
	ApprovalRestore
	// ApprovalCheckStored: the answer does not say whether the write was
	// applied (a 5xx, a broken connection, a timeout); what kube-apiserver
	// stores decides (WriteNotApplied).
	ApprovalCheckStored
)

// OnWriteAnswer decides the fate of a reserved once approval from the code
// the write it was reserved for was answered with. kube-apiserver answers
// 4xx only for a write it did not store (a conflict, an admission
// refusal, a throttled request); a 5xx or no answer at all may come after
// the object was stored.
func OnWriteAnswer(code int) ReservedApprovalAction {
	switch {
	case code >= 200 && code < 300:
		return ApprovalUsed
	case code >= 400 && code < 500:
		return ApprovalRestore
	default:
		return ApprovalCheckStored
	}
}

// StoredState is what kube-apiserver stores under a write's object name.
type StoredState struct {
	Exists          bool   `json:"exists"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// WriteNotApplied reports whether a write of op whose answer did not say
// (see ApprovalCheckStored) was certainly not applied: kube-apiserver still
// stores exactly what the proxy read before it forwarded the write. Every
// change of the resourceVersion could be that write, and a create without
// a name cannot be looked for, so anything else counts as applied and the
// approval stays spent: an approval admits at most one write.
func WriteNotApplied(op Operation, before, after StoredState) bool {
	switch op {
	case Create:
		return !before.Exists && !after.Exists
	case Update, Delete:
		return before.Exists && after.Exists && before.ResourceVersion != "" &&
			after.UID == before.UID && after.ResourceVersion == before.ResourceVersion
	default:
		return false
	}
}

// UnderBoth combines the decisions of a write under the parent it ends up
// with (primary) and under the parent it moves away from (former): the
// write stands only if it stands under both, so moving a child away from a
// frozen or settled parent is no way around it.
//
// A once approval the write uses under the former parent is consumed like
// any other: the move is that parent's approved write. One write reserves
// one approval, so a write that would use once approvals of both parents
// is refused with what to approve instead.
func UnderBoth(primary, former Decision) Decision {
	if former.Result == Deny {
		return former
	}
	if former.ConsumeOnce {
		if primary.ConsumeOnce {
			primary.Result, primary.Reason = Deny, "the write uses once approvals of both the parent it leaves and the one it joins; one write reserves one approval"
			primary.Message = "this write moves " + primary.Child.String() + " between two parents and would use a once approval of each; " +
				"one write can reserve only one: approve it on one of them with mode generation instead"
			primary.ConsumeOnce, primary.ApprovalsUpdate, primary.ChildAnnotations = false, nil, nil
			return primary
		}
		primary.ConsumeOnce, primary.ApprovalsUpdate, primary.Approval = true, former.ApprovalsUpdate, former.Approval
		primary.Report = former.Report
		primary.Reason += "; leaving its former parent uses its once approval (" + former.Reason + ")"
	}
	primary.Warnings = append(primary.Warnings, former.Warnings...)
	return primary
}
