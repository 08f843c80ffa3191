package decision

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// The write path's rules that are not about one write's verdict: what to
// do when a fact cannot be established, which facts a verdict still needs
// before it is acted on, and what to do when reserving a once approval or
// the forwarded write meets a change made meanwhile. They are here, pure,
// so the orchestration only carries them out.

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
//
// An allowance violation is confirmed the same way: the allowances a
// change grants may reach the parent a beat before the controller's write
// and the cache a beat after it.
func NeedsConfirmation(d *Decision, parentFromCache bool) bool {
	violation := d.Allowances != nil && len(d.Allowances.Violations) > 0
	return (d.Drift || violation) && parentFromCache
}

// Held says which facts of a write are first-hand already, so that no
// read is made twice.
type Held struct {
	// Confirmable: the write is of an object kube-apiserver can dry-run
	// and the proxy can read (the main resource, or /scale of it).
	Confirmable bool
	// MainResource: the write is of the object itself (not a
	// subresource); StatusWrite: of its status. Only these can change its
	// controls (kube-apiserver keeps a status write's annotations for
	// most kinds).
	MainResource, StatusWrite bool
	// ChildLive: the stored object was read live. ChildListed: it comes
	// from the live list of what a deletecollection deletes, the snapshot
	// the request is decided on.
	ChildLive, ChildListed bool
	// ParentFromCache: the parent snapshot comes from the cache.
	ParentFromCache bool
	// ChildAccessKnown, ParentAccessKnown: whether the caller may read
	// the object, and its parents, has been asked.
	ChildAccessKnown, ParentAccessKnown bool
	// HasChanges: the write changes desired fields a message may list.
	HasChanges bool
	// ChildMetadataOnly: the stored child is its cached metadata, not the
	// whole object; Operation is the write's.
	ChildMetadataOnly bool
	Operation         Operation
	// NamesOtherVersion: the write names a resourceVersion other than the
	// one of the stored object it was decided on (a patch that carries its
	// own precondition; an update of another version is decided on that
	// version from the start).
	NamesOtherVersion bool
	// NamesOlderVersion: an update names a resourceVersion other than
	// that of the object read live. A live read is as new as what
	// kube-apiserver stores, so the version is older, and kube-apiserver
	// refuses the write with a conflict whatever else it holds.
	NamesOlderVersion bool
}

// Need lists the facts a decision still needs. The reads behind them are
// independent of each other and run together.
type Need struct {
	// LiveChild: the stored object, read live, with the write applied to
	// it again; NoCopy: read from kube-apiserver, not from the copy the
	// proxy kept of the version its cache holds.
	LiveChild, NoCopy bool
	// ServerResult: kube-apiserver's own result for the write (a live
	// read of the object and a server-side dry run of the same request).
	ServerResult bool
	// FreshParent: the parent read live.
	FreshParent bool
	// ChildAccess, ParentAccess: whether the caller may read the object
	// (a denial shows stored values only to readers) and its parents (a
	// denial names them only to readers).
	ChildAccess, ParentAccess bool
	// Conflict: nothing more is needed, kube-apiserver's answer is known:
	// the conflict it gives a write of an older version.
	Conflict bool
}

// None reports whether nothing is needed.
func (n Need) None() bool { return n == Need{} }

// Needs says what d still needs before it is acted on, given what is held.
// The verdict's own facts come first: who may read what only matters for
// the message of the verdict that stands.
func Needs(d *Decision, h Held) Need {
	var n Need
	if h.ChildMetadataOnly && !h.ChildLive && !d.StandsOnMetadata(h.Operation) {
		if d.ConfirmWithServer && h.Confirmable {
			// Drift told from the metadata is likely drift: kube-apiserver's
			// result reads the whole child live anyway, so it and the parent
			// are read at once rather than after the child.
			n.ServerResult = true
			n.FreshParent = NeedsConfirmation(d, h.ParentFromCache)
			n.withAccessOfLikelyDrift(d, h)
			return n
		}
		// Any other verdict made on the metadata alone asks nothing else:
		// the whole child may decide it otherwise, and cheaper.
		n.LiveChild = true
		return n
	}
	n.LiveChild = d.RecheckController && (h.MainResource || h.StatusWrite) && !h.ChildLive
	// The system annotations put back must be the stored values of the
	// version the write lands on, which is the caller's when it names one.
	n.LiveChild = n.LiveChild || d.OnStoredVersion && h.NamesOtherVersion && !h.ChildLive
	n.LiveChild = n.LiveChild || d.AlreadyDeleting && !h.ChildLive && !h.ChildListed
	n.ServerResult = d.ConfirmWithServer && h.Confirmable
	if n.ServerResult && h.NamesOlderVersion {
		// kube-apiserver would answer the dry run with the conflict it
		// gives the write: the body of a verdict that does not stand on
		// its own need not go upstream to learn that.
		return Need{Conflict: true}
	}
	n.FreshParent = NeedsConfirmation(d, h.ParentFromCache)
	if n.ServerResult {
		// The dry run's facts include a live read of the object.
		n.LiveChild = false
	}
	// A copy of the version the cache holds is as far behind as the
	// cache.
	n.NoCopy = n.LiveChild
	if n.ServerResult {
		n.withAccessOfLikelyDrift(d, h)
	}
	if !n.None() {
		return n
	}
	n.withAccess(d, h)
	return n
}

// withAccess asks who may read what d's message shows.
func (n *Need) withAccess(d *Decision, h Held) {
	n.ChildAccess = (d.Drift || d.Result == Deny) && h.HasChanges && !h.ChildAccessKnown
	n.ParentAccess = (d.Result == Deny || len(d.Warnings) > 0) && !h.ParentAccessKnown
}

// withAccessOfLikelyDrift asks, beside kube-apiserver's result, who may
// read what the message of a drift verdict shows: a drift verdict is
// mostly confirmed, and its message then waits on these answers. Asked
// together with the confirmation, they cost the drift path no round trip
// of its own; a verdict the confirmation overturns wasted a cached
// authorization.
func (n *Need) withAccessOfLikelyDrift(d *Decision, h Held) {
	if d.Drift {
		n.withAccess(d, h)
	}
}

// Step is one thing done with a decided write.
type Step int

// Steps, in the order they are done.
const (
	// StepRefuse answers the denial; nothing is forwarded.
	StepRefuse Step = iota
	// StepPrepare builds the request to forward: the child's annotations
	// written into the body, and the resourceVersion the verdict was
	// confirmed on.
	StepPrepare
	// StepPreflight dry-runs the prepared request as the caller: the
	// proxy writes a parent with its own credentials only for a write
	// kube-apiserver is going to accept.
	StepPreflight
	// StepReserve takes the once approval off its parent.
	StepReserve
	// StepWriteAhead writes AnnotationsAhead to the object under the
	// resourceVersion the write was decided on, and prepares the write
	// again on the version that produced.
	StepWriteAhead
	// StepForward forwards the prepared request; after success come the
	// parent writes and the report.
	StepForward
)

// StepsFor is what is done with d: refused, or prepared and forwarded, a
// once approval reserved in between (after one preflight per write; a
// dry run consumes nothing).
//
// The proxy writes with its own credentials only for a write kube-apiserver
// is going to accept: annotations written ahead of the write follow a
// preflight too, or a caller who may not scale an object could leave
// allowances on it.
func StepsFor(d *Decision, dryRun, preflighted bool) []Step {
	if d.Result == Deny {
		return []Step{StepRefuse}
	}
	if dryRun {
		return []Step{StepPrepare, StepForward}
	}
	reserve := d.ConsumeOnce && d.ApprovalsUpdate != nil
	ahead := !d.AnnotationsAhead.Empty()
	steps := []Step{StepPrepare}
	if (reserve || ahead) && !preflighted {
		steps = append(steps, StepPreflight)
	}
	if reserve {
		steps = append(steps, StepReserve)
	}
	if ahead {
		steps = append(steps, StepWriteAhead)
	}
	return append(steps, StepForward)
}

// MaxRounds bounds how often one write is decided again on fresh state:
// after a reservation conflict, or after the proxy's own precondition on
// the forwarded write failed. Each round reads the state anew.
const MaxRounds = 3

// ConflictAction is what follows kube-apiserver's 409 for a forwarded
// write.
type ConflictAction int

// Conflict actions.
const (
	// RelayConflict: the client named the resourceVersion (or the proxy
	// added none): the 409 is kube-apiserver's answer to the client's own
	// write, and goes back as it is.
	RelayConflict ConflictAction = iota
	// DecideAgainOnFreshState: the 409 is the proxy's precondition,
	// which the client did not ask for; the object moved since the
	// decision, so the write is decided again on what is stored now.
	DecideAgainOnFreshState
	// RefuseStillMoving: the object kept moving for MaxRounds decisions;
	// the client gets a retryable answer, never a 409 it did not ask for.
	RefuseStillMoving
)

// OnForwardedConflict decides what follows a 409 in round (1-based). A
// client that sent no resourceVersion asked kube-apiserver to apply its
// write to the latest object; the proxy adds a precondition only so that
// drift is never admitted by a race, and when that precondition fails it
// decides again rather than hand the client a conflict.
func OnForwardedConflict(preconditionAddedByProxy bool, round int) ConflictAction {
	switch {
	case !preconditionAddedByProxy:
		return RelayConflict
	case round >= MaxRounds:
		return RefuseStillMoving
	default:
		return DecideAgainOnFreshState
	}
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
	// ApprovalCheckStored: kube-apiserver is done with the write, but its
	// answer does not say what was applied (a deletecollection that
	// failed after some deletes); what it stores decides
	// (WriteNotApplied).
	ApprovalCheckStored
	// ApprovalCheckStoredAfterDeadline: the answer does not say whether
	// the write was applied, and the write may still be processed (a 5xx:
	// kube-apiserver answers 504 at its deadline and lets the write go
	// on, and a storage transaction that timed out may still commit; a
	// broken connection, or no answer at all). What kube-apiserver stores
	// decides, but an object stored as it was proves the write did not
	// land only once the write's deadline there has passed.
	ApprovalCheckStoredAfterDeadline
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
		return ApprovalCheckStoredAfterDeadline
	}
}

// OnCollectionAnswer decides the fate of the once approvals reserved for
// the objects of a deletecollection from its answer code. kube-apiserver
// deletes the objects one by one and may fail after some are gone, so
// only success says that every object went; any other answer is settled
// per object by what kube-apiserver stores, and only the approvals of
// objects still stored as they were go back.
func OnCollectionAnswer(code int) ReservedApprovalAction {
	switch {
	case code >= 200 && code < 300:
		return ApprovalUsed
	case code >= 400 && code < 500:
		return ApprovalCheckStored
	default:
		return ApprovalCheckStoredAfterDeadline
	}
}

// MaxNamedChildren bounds the objects a refused deletecollection names.
const MaxNamedChildren = 10

// CollectionVerdict combines the decisions of the objects one
// deletecollection would delete: it stands only if every one of them is
// allowed. A refused request is never narrowed to the rest: its success
// would say that everything matching is gone.
type CollectionVerdict struct {
	Refused bool
	// Denied counts the objects that may not be deleted; Blocked holds the
	// indexes of the first MaxNamedChildren of them.
	Denied  int
	Blocked []int
}

// Add combines the decision of the object at index.
func (v *CollectionVerdict) Add(index int, d *Decision) {
	if d.Result != Deny {
		return
	}
	v.Refused = true
	v.Denied++
	if len(v.Blocked) < MaxNamedChildren {
		v.Blocked = append(v.Blocked, index)
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
	if primary.Result == Deny {
		// Refused under the parent it ends up with (frozen, an allowance
		// violation): nothing of the former parent's verdict is used.
		primary.Warnings = append(primary.Warnings, former.Warnings...)
		return primary
	}
	// What the parent it ends up with reports (an allowance violation in
	// log mode) is not replaced by the carry-over below.
	ownReport := primary.Report
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
	if former.Drift && former.Report == ReportDetected && !primary.Drift && ownReport == ReportNone {
		// Allowed only because the mode is log: the write is still
		// unapproved drift under the parent it leaves, and is recorded and
		// reported under that parent. (An approved one is the former
		// parent's approved write, as above.)
		primary.Drift, primary.Category, primary.Report = true, former.Category, former.Report
		primary.Parent, primary.Mode, primary.ModeSource = former.Parent, former.Mode, former.ModeSource
		primary.Suggested, primary.Snooze = former.Suggested, former.Snooze
		primary.ConfirmWithServer = primary.ConfirmWithServer || former.ConfirmWithServer
		primary.Reason = "leaving its former parent: " + former.Reason + "; under the parent it ends up with: " + primary.Reason
	}
	primary.Warnings = append(primary.Warnings, former.Warnings...)
	return primary
}

// DesiredChange reports whether a write changes the desired state, and
// which fields. A delete always does, and no field is listed: the object
// goes whole.
func DesiredChange(op Operation, old, new *unstructured.Unstructured) (bool, []desired.Change) {
	if op == Delete {
		return true, nil
	}
	return desired.Changed(old, new)
}
