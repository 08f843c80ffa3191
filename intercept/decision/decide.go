// Package decision is the drift decision engine: given one intercepted
// write and a snapshot of its parent, it decides Allow or Deny, why, and
// which annotations to write. It is pure: no I/O, no clocks (Input.Now), no
// client calls. Shadow mode is the caller's: it forwards the request
// unchanged and logs the Decision.
//
// Order of decision:
//
//	status subresource write                      → StatusWrite (record controller, phase)
//	  changes kausality.io annotations people set → StatusAnnotationsRefused (Deny)
//	  changes system annotations                  → kept as stored
//	no desired-state change (metadata/status)     → NoDesiredChange (protect annotations)
//	no controller owner                           → NoParent (new trace)
//	parent deletionTimestamp                      → ParentDeleting
//	parent frozen                                 → Frozen (Deny, any actor, any mode, any phase)
//	parent not initialized                        → ParentInitializing
//	controller unknown (a new parent)             → ControllerUnknown (lenient, hop of the parent's trace)
//	not the parent's controller                   → NewOrigin (new trace)
//	controller, parent not settled at its spec    → Expected (trace hop)
//	controller deletes a retired revision beyond
//	  the parent's revisionHistoryLimit           → HistoryPruned (see history)
//	controller, ungated child kind (Pods)         → SelfHealing (trace hop)
//	controller, parent settled at its spec (drift):
//	  matching rejection / malformed rejections   → DriftRejected (Deny in every mode)
//	  valid approval                              → DriftApproved (trace hop, consume once)
//	  a rule of the writer's ApprovalPolicies     → DriftApprovedByPolicy (trace hop)
//	  otherwise                                   → DriftUnapproved (enforce: Deny; log: Allow + warning)
//
// Then, whatever allowed it: an update by the written object's own
// controller that changes the object's approvals, rejections, freeze,
// snooze or mode (as it would be stored) → OwnControlsRefused (Deny).
//
// The controller is an authenticated user (see controllerid). Whether the
// parent is settled at its spec comes from Input.Settle (see settle): a
// rollout that keeps writing children after observedGeneration caught up is
// expected, and a generation bump that changed only annotations is not a
// spec change. Approvals name generations; all generations over which the
// parent kept its current spec name the same intent (approval.Window).
package decision

import (
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/history"
	"github.com/kausality-io/kausality-proxy/intercept/lifecycle"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
)

// decider carries the per-call state.
type decider struct {
	in       Input
	d        *Decision
	now      time.Time
	oldAnn   map[string]string
	newAnn   map[string]string
	parAnn   map[string]string
	userHash string
	user     controllerid.User
	parent   ObjectRef
	ident    *controllerid.Identity
	// ungatedBy is the ungatedChildKinds entry that leaves the child
	// ungated under its parent.
	ungatedBy UngatedKind
}

// Decide decides one intercepted write.
func Decide(in Input) Decision {
	d := decideOnce(in)
	if in.Update() && !in.Confirmed {
		d.ConfirmWithServer = d.Drift || d.Category == NoDesiredChange && !in.NoChangeIsCertain && wouldBeHeld(in)
	}
	return d
}

// wouldBeHeld reports whether a write that changes no desired state (by
// the proxy's computation) would be drift or frozen if it did: under a
// stale cache, or with defaulting the proxy does not do, the computation
// may be wrong, and the verdict is then about an object kube-apiserver
// would not store.
func wouldBeHeld(in Input) bool {
	if in.Parent == nil || in.StatusWrite {
		return false
	}
	in.DesiredChanged = true
	h := decideOnce(in)
	return h.Drift || h.Category == Frozen
}

func decideOnce(in Input) Decision {
	d := Decision{Result: Allow}
	x := &decider{in: in, d: &d, now: in.Now}
	if x.now.IsZero() {
		x.now = time.Now() //nolint:forbidigo // a caller without a clock gets the wall clock; the write path always passes Input.Now
	}
	x.oldAnn = annotationsOf(in.OldObject)
	x.newAnn = annotationsOf(in.NewObject)

	d.Child = x.childRef()
	var name string
	if in.User != nil {
		name = in.User.GetName()
	}
	x.user = userHashesOf(in)
	x.userHash = x.user.Short
	d.Actor = Actor{User: name, UserHash: x.userHash, FieldManager: in.FieldManager}

	x.decide()
	if in.StatusInObject && !in.StatusWrite && in.Operation == Update && d.Result == Allow {
		x.recordStatusWriter(true)
	}
	// A controller that copies its parent's annotations onto a child
	// (the deployment controller does) never resets the child's record.
	if d.Result == Allow && !in.StatusWrite && ResetsControllers(x.oldAnn, x.newAnn, x.user) && !x.isController() {
		d.ChildAnnotations = withRemoved(d.ChildAnnotations, annotations.Controllers)
		d.Reason += "; " + name + " reset " + annotations.Controllers
	}
	x.guardOwnControls()
	if !in.StatusWrite && x.in.Parent != nil && x.isController() {
		d = KeepChildModes(d, in.OldObject, in.NewObject, x.user.Long)
	}
	recordsWriters := d.Result == Allow && !in.StatusWrite && x.recordApprovalWriters()
	recordsSetters := d.Result == Allow && !in.StatusWrite && x.recordModeSetters()

	d.OnStoredVersion = d.Result == Allow && in.Operation == Update && !in.ScaleWrite &&
		(!KeepSystemAnnotations(in.OldObject, in.NewObject).Empty() || addsUpdater(&d, in.OldObject) || recordsWriters || recordsSetters)
	if d.Result == Deny {
		d.ChildAnnotations, d.Trace, d.TraceOrigin = nil, "", false
		d.ParentWrites, d.ApprovalsUpdate, d.ConsumeOnce = nil, nil, false
	}
	if in.DryRun {
		d.ParentWrites, d.ApprovalsUpdate, d.ConsumeOnce, d.Report = nil, nil, false, ReportNone
	}
	// Messages carry annotation text and user names; kubectl prints them
	// to terminals as they come.
	for i, w := range d.Warnings {
		if in.ParentHidden && x.parent.Name != "" && strings.Contains(w, x.parent.String()) {
			w = "kausality: a warning about " + hiddenParentText + " is withheld; " + askOwnerText + " to see it"
		}
		d.Warnings[i] = annotations.Printable(w)
	}
	d.Message = annotations.Printable(d.Message)
	for i := range d.Causes {
		d.Causes[i].Message = annotations.Printable(d.Causes[i].Message)
		d.Causes[i].Field = annotations.Printable(d.Causes[i].Field)
	}
	return d
}

func (x *decider) childRef() ObjectRef {
	c := x.in.Child
	obj := x.in.NewObject
	if obj == nil {
		obj = x.in.OldObject
	}
	//nolint:nestif // the reference is filled from whichever object the write has
	if obj != nil {
		if c.APIVersion == "" {
			c.APIVersion = obj.GetAPIVersion()
		}
		if c.Kind == "" {
			c.Kind = obj.GetKind()
		}
		if c.Namespace == "" {
			c.Namespace = obj.GetNamespace()
		}
		if c.Name == "" {
			c.Name = obj.GetName()
		}
		if c.Name == "" {
			c.Name = obj.GetGenerateName()
		}
	}
	return c
}

func annotationsOf(obj *unstructured.Unstructured) map[string]string {
	if obj == nil {
		return nil
	}
	meta, _ := obj.Object["metadata"].(map[string]interface{})
	raw, _ := meta["annotations"].(map[string]interface{})
	if len(raw) == 0 {
		return nil
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

func (x *decider) warn(w annotations.Warning, object string) {
	w.Object = object
	x.d.Warnings = append(x.d.Warnings, w.String())
}

func (x *decider) warns(ws []annotations.Warning, object string) {
	for _, w := range ws {
		x.warn(w, object)
	}
}

func (x *decider) identify() controllerid.Identity {
	if x.ident != nil {
		return *x.ident
	}
	id := controllerid.Identify(x.in.Parent, x.in.FieldManager, x.user)
	x.ident = &id
	a := &x.d.Actor
	a.IsController, a.Determined, a.Method = id.IsController, id.Determined, id.Method
	a.ControllerManagers, a.Reason = id.Managers, id.Reason
	if id.Err != nil {
		x.d.Warnings = append(x.d.Warnings, "kausality: cannot parse managedFields of parent "+x.parent.String()+": "+id.Err.Error())
	}
	return id
}

func (x *decider) isController() bool {
	if x.in.Parent == nil {
		return false
	}
	id := x.identify()
	return id.Determined && id.IsController
}

//nolint:funlen // the decision's order of checks is the policy; it reads best top to bottom in one place
func (x *decider) decide() {
	in, d := x.in, x.d
	if in.StatusWrite {
		x.statusWrite()
		return
	}
	if in.Parent != nil {
		x.parAnn = annotationsOf(in.Parent)
		x.parent = RefOf(in.Parent)
		d.Parent = x.parentInfo()
	}

	// Moving a child away from its controller owner is a write under that
	// owner even when nothing else changes: otherwise a child leaves a
	// frozen or settled parent in a metadata-only write, and its next spec
	// change has no parent to answer to. Adopting an orphan is a write
	// under the parent it joins, as creating it there would be: otherwise
	// a controller creates its settled parent's child as an orphan, and
	// adopts it.
	changed := in.DesiredChanged || in.Operation == Create || in.Operation == Delete ||
		ControllerMoved(in.OldObject, in.NewObject) || Adopted(in.OldObject, in.NewObject)
	if in.Operation == Delete && in.OldObject != nil && in.OldObject.GetDeletionTimestamp() != nil && !DeleteChangesDeleting(in.OldObject, in.DeleteOptions) {
		// Deleting an object that is being deleted already (an operator
		// that deletes until NotFound while a finalizer holds it) changes
		// nothing: its deletion was decided when it was first asked for.
		d.Category, d.AlreadyDeleting = NoDesiredChange, true
		d.Reason = "no desired-state change: the object is being deleted already"
		return
	}
	if !changed {
		d.Category = NoDesiredChange
		d.Reason = "no desired-state change (only metadata and/or status)"
		if kausalityDiffers(x.oldAnn, x.newAnn) {
			var out map[string]string
			if x.isController() {
				out = ComputeAnnotationsForController(x.oldAnn, x.newAnn, false, "", "")
			} else {
				out = ComputeAnnotationsForUser(x.oldAnn, x.newAnn, false, "", "")
			}
			d.ChildAnnotations = diffAnnotations(x.newAnn, out)
		}
		return
	}

	if in.Parent == nil {
		d.Category = NoParent
		d.Reason = "no controller owner reference: new causal origin"
		x.writeChild(false, false)
		return
	}

	d.Mode, d.ModeSource = x.resolveMode()

	lc := in.Lifecycle.Detect(in.Parent)
	d.Parent.Phase, d.Parent.PhaseReason = lc.Phase, lc.Reason
	controller := x.isController()
	reconciling := x.reconciling()
	if lc.Phase == lifecycle.Deleting {
		d.Category = ParentDeleting
		d.Reason = "parent is being deleted (cleanup)"
		x.writeChild(controller, controller && reconciling)
		return
	}

	// A freeze holds whatever the parent's phase: a person who freezes a
	// StatefulSet or a Job means it before the proxy has seen it ready.
	fz, w := annotations.ParseFreeze(x.parAnn[annotations.Freeze])
	if w != nil {
		x.warn(*w, "parent "+x.parent.String())
	}
	if fz != nil {
		d.Result, d.Category, d.Freeze = Deny, Frozen, fz
		d.Reason = "parent is " + fz.String()
		x.frozenMessage(fz)
		return
	}

	if lc.Phase == lifecycle.Initializing {
		d.Category = ParentInitializing
		d.Reason = "parent is initializing (" + lc.Reason + ")"
		// A new parent's first children are written before its
		// controller's first status write names it: they carry on the
		// parent's trace, not start one of their own.
		unknown := !x.identify().Determined
		x.writeChild(controller, (controller || unknown) && reconciling)
		return
	}
	// The high-water mark is persisted only from the parent's own status
	// writes (see statusWrite), not from child writes: annotating a
	// Deployment bumps its generation, and a bump caused by us while its
	// controller is stable would make the controller's next write look
	// expected and hide drift.

	id := x.identify()
	switch {
	case !id.Determined:
		// Typically a new parent's first children, written before its
		// controller's first status write names it: they carry on the
		// parent's trace.
		d.Category = ControllerUnknown
		d.Reason = id.Reason + " (lenient: no drift check)"
		x.writeChild(false, true)
		return
	case !id.IsController:
		d.Category = NewOrigin
		d.Reason = "not the parent's controller: " + id.Reason
		if hit := x.matchPolicies(true); hit != nil {
			d.Reason += "; matches " + hit.String() + " (newOrigins)"
		}
		x.writeChild(false, false)
		return
	case reconciling:
		d.Category = Expected
		if in.Settle != nil {
			d.Reason = "expected: the parent " + in.Settle.Reason
		} else if d.Parent.ObservedGenerationSource == "" {
			d.Reason = "parent reports no observedGeneration: cannot tell drift, treated as expected"
		} else {
			d.Reason = "expected: parent generation " + itoa(d.Parent.Generation) + " != observedGeneration " + itoa(d.Parent.ObservedGeneration)
		}
		x.pruneApprovals()
		x.writeChild(true, true)
		return
	case in.Operation == Delete && x.prunesHistory():
		return
	case x.ungated():
		d.Category = SelfHealing
		children := d.Child.Kind + " children"
		if x.ungatedBy.Parent.Kind != "" {
			children += " of " + x.parent.Kind + " parents"
		}
		d.Reason = "the parent is settled, and " + children + " are traced, not gated (ungatedChildKinds): its controller replaces them by design"
		x.writeChild(true, true)
		return
	}
	x.drift()
}

// prunesHistory reports, and decides, a controller's delete of a retired
// revision beyond its parent's revisionHistoryLimit: the parent's spec
// asks for it, so it is not drift even though the parent has settled.
func (x *decider) prunesHistory() bool {
	ok, why := history.Pruning(x.in.Parent, x.in.OldObject, x.in.OwnedRevisions)
	if !ok {
		return false
	}
	x.d.Category = HistoryPruned
	x.d.Reason = "the parent is settled, and its controller prunes revision history: " + why
	return true
}

// ungated reports whether the child's kind is one the configuration leaves
// ungated: children a controller re-creates by design (a Pod a node drain
// evicted, a CronJob's next Job), which enforce mode must not hold back.
func (x *decider) ungated() bool {
	var ok bool
	x.ungatedBy, ok = UngatedBy(x.in.UngatedKinds, GroupKindOf(x.d.Child.APIVersion, x.d.Child.Kind), GroupKindOf(x.parent.APIVersion, x.parent.Kind))
	return ok
}

// window is the range of parent generations that name its current spec.
func (x *decider) window() approval.Window {
	w := approval.At(x.d.Parent.Generation)
	if x.in.Settle != nil {
		w.From = x.in.Settle.SpecSince
	}
	return w
}

// reconciling: the parent is carrying out a spec change. With settledness
// facts: it has not settled at its current spec. Without: its generation
// differs from its observed one (or nothing reports an observed
// generation).
func (x *decider) reconciling() bool {
	if x.in.Settle != nil {
		return !x.in.Settle.AtCurrentSpec
	}
	p := x.d.Parent
	return p.ObservedGenerationSource == "" || p.Generation != p.ObservedGeneration
}

func (x *decider) parentInfo() *ParentInfo {
	p := x.in.Parent
	info := &ParentInfo{Ref: x.parent, UID: string(p.GetUID()), ResourceVersion: p.GetResourceVersion(), Generation: p.GetGeneration()}
	if g, src, ok := lifecycle.ObservedGeneration(p); ok {
		info.ObservedGeneration, info.ObservedGenerationSource = g, src
	}
	return info
}

func (x *decider) resolveMode() (annotations.DriftMode, ModeSource) {
	type level struct {
		value, object string
		src           ModeSource
	}
	own := x.oldAnn[annotations.Mode]
	if Adopted(x.in.OldObject, x.in.NewObject) {
		// An orphan's own mode was written with no parent to answer to:
		// its adoption is decided as the parent's other children are.
		own = ""
	}
	// A mode the parent's controller set before its status writes named
	// it (on the first children it created, or on their namespace) does
	// not gate it.
	const gates = "how its writes are gated"
	if !Adopted(x.in.OldObject, x.in.NewObject) {
		var w string
		if own, _, w = modeAsPeopleSetIt(x.oldAnn, annotations.Mode, x.heldByController, "child "+x.d.Child.String(), gates); w != "" {
			x.d.Warnings = append(x.d.Warnings, w)
		}
	}
	nsAnn := map[string]string{annotations.ModesBy: x.in.Mode.NamespaceModesBy}
	if x.in.Mode.Namespace != "" {
		nsAnn[annotations.Mode] = x.in.Mode.Namespace
	}
	namespace, _, w := modeAsPeopleSetIt(nsAnn, annotations.Mode, x.heldByController, "namespace "+x.d.Child.Namespace, gates)
	if w != "" {
		x.d.Warnings = append(x.d.Warnings, w)
	}
	levels := [...]level{
		{own, "child " + x.d.Child.String() + " (stored)", ModeFromObject},
		{namespace, "namespace " + x.d.Child.Namespace, ModeFromNamespace},
		{x.in.Mode.Controller, "per-controller config", ModeFromController},
		{string(x.in.Mode.Default), "default mode", ModeFromDefault},
	}
	for _, l := range levels {
		m, set, w := annotations.ParseMode(l.value)
		if w != nil {
			if l.src == ModeFromController || l.src == ModeFromDefault {
				w.Annotation = "mode setting"
			}
			x.warn(*w, l.object)
		}
		if set {
			return m, l.src
		}
	}
	return annotations.ModeLog, ModeFromDefault
}

//nolint:funlen // the drift verdict's cases are one ordered list; split, their precedence would be hidden
func (x *decider) drift() {
	d := x.d
	d.Drift = true
	parentObj := "parent " + x.parent.String()
	approvals, aw, _ := annotations.ParseApprovalEntries(x.parAnn[annotations.Approvals])
	x.warns(aw, parentObj)
	x.setAsideOwnApprovals(approvals)
	rejections, rw := annotations.ParseRejections(x.parAnn[annotations.Rejections])
	if rw != nil {
		x.warn(*rw, parentObj)
	}
	snooze, sw := annotations.ParseSnooze(x.parAnn)
	if sw != nil {
		x.warn(*sw, parentObj)
	}
	if snooze != nil {
		d.Snooze = SnoozeState{Snoozed: snooze.ActiveAt(x.now), Until: snooze.Until, Annotation: snooze.Annotation}
	}

	child := approval.ChildOf(d.Child.APIVersion, d.Child.Kind, d.Child.Namespace, d.Child.Name, d.Parent.Ref.Namespace)
	win := x.window()
	ev := approval.Evaluate(approvals, rejections, rw != nil, child, win)
	// Policies are matched whatever the annotations say, so that a
	// rejection's message can say which policy it overrode.
	hit := x.matchPolicies(false)
	genText := "parent generation " + itoa(d.Parent.Generation) + " == observedGeneration " + itoa(d.Parent.ObservedGeneration)
	if x.in.Settle != nil {
		genText = "the parent " + x.in.Settle.Reason
	}

	switch ev.Outcome {
	case approval.Rejected:
		d.Result, d.Category, d.Rejection = Deny, DriftRejected, ev.Rejection
		d.Reason = "drift rejected (" + genText + "): " + ev.Rejection.Reason
		x.rejectedMessage(ev)
		return

	case approval.Approved:
		d.Category, d.Approval = DriftApproved, ev.Approval
		d.Reason = "drift approved by " + string(ev.Approval.EffectiveMode()) + " approval (" + genText + ")"
		if ev.Consume {
			d.ConsumeOnce = true
			d.ApprovalsUpdate = &ApprovalsUpdate{Target: x.parent, ResourceVersion: d.Parent.ResourceVersion,
				Old: x.parAnn[annotations.Approvals], New: ev.NewApprovals, Consumed: *ev.Approval, ConsumedRaw: ev.ApprovalRaw, Pruned: ev.Pruned}
		} else if ev.ApprovalsChanged {
			x.setApprovalsSideWrite(ev.NewApprovals, len(ev.Pruned))
		}
		d.Report = ReportResolved
		x.writeChild(true, true)
		return
	}

	if hit != nil {
		d.Category, d.Policy = DriftApprovedByPolicy, hit
		d.Reason = "drift approved by " + hit.String() + " (" + genText + ")"
		if ev.ApprovalsChanged {
			x.setApprovalsSideWrite(ev.NewApprovals, len(ev.Pruned))
		}
		d.Report = ReportResolved
		x.writeChild(true, true)
		return
	}

	sugg, suggValue := approval.Suggest(approvals, child, win)
	d.Suggested = &sugg
	d.Category = DriftUnapproved
	enforce := d.Mode == annotations.ModeEnforce
	x.unapprovedMessage(sugg, suggValue, enforce)
	if !d.Snooze.Snoozed {
		d.Report = ReportDetected
	}
	if enforce {
		d.Result = Deny
		d.Reason = "drift without approval (" + genText + "; " + x.noPolicyText() + "), enforce mode (" + string(d.ModeSource) + ")"
		return
	}
	d.Reason = "drift without approval (" + genText + "; " + x.noPolicyText() + "), allowed in log mode (" + string(d.ModeSource) + ")"
	d.Warnings = append(d.Warnings, x.logModeWarning(sugg))
	if ev.ApprovalsChanged {
		x.setApprovalsSideWrite(ev.NewApprovals, len(ev.Pruned))
	}
	// Unapproved drift starts a new causal chain at this write.
	x.writeChild(true, false)
}

// matchPolicies matches the write against the writer's approval
// policies, and records what was tried and what went wrong.
func (x *decider) matchPolicies(newOrigin bool) *policy.Hit {
	in, d := x.in, x.d
	req := policy.Request{APIVersion: d.Child.APIVersion, Kind: d.Child.Kind, Namespace: d.Child.Namespace, Name: d.Child.Name,
		Now: x.now, NewOrigin: newOrigin}
	if in.OldObject != nil {
		req.Old = in.OldObject.Object
	}
	if in.NewObject != nil {
		req.New = in.NewObject.Object
	}
	res := in.Policies.Match(req)
	d.PoliciesEvaluated, d.PolicyProblems = res.Evaluated, res.Problems
	if res.Unfinished != "" {
		d.Warnings = append(d.Warnings, "kausality: "+res.Unfinished)
	}
	if res.Hit != nil {
		d.Policy = res.Hit
	}
	return res.Hit
}

// noPolicyText says that no approval policy matched.
func (x *decider) noPolicyText() string {
	n := len(x.d.PoliciesEvaluated)
	if n == 0 {
		return "no ApprovalPolicy applies to " + x.d.Actor.User
	}
	names := make([]string, n)
	for i, r := range x.d.PoliciesEvaluated {
		names[i] = r.String()
	}
	return "no rule of " + strings.Join(names, ", ") + " matched"
}

// pruneApprovals schedules removal of stale approvals (Expected path).
// Entries it cannot read stay as written, and a value that is not a JSON
// array is left alone; the drift path warns about both.
func (x *decider) pruneApprovals() {
	v := x.parAnn[annotations.Approvals]
	if v == "" {
		return
	}
	if nv, pruned, changed := approval.PruneValue(v, x.window()); changed {
		x.setApprovalsSideWrite(nv, len(pruned))
	}
}

func (x *decider) setApprovalsSideWrite(value string, pruned int) {
	x.addParentWrite(x.parent, x.parentUID(), annotations.Approvals, x.parAnn[annotations.Approvals], value,
		"prune "+strconv.Itoa(pruned)+" stale approval(s): the parent's spec is at generation "+itoa(x.window().From))
}

// parentWriteIndex is the index of the side write made at once on
// target, the object with uid, -1 without one.
func (x *decider) parentWriteIndex(target ObjectRef, uid types.UID) int {
	for i := range x.d.ParentWrites {
		if x.d.ParentWrites[i].Target == target && x.d.ParentWrites[i].TargetUID == uid && !x.d.ParentWrites[i].Deferred {
			return i
		}
	}
	return -1
}

// addParentWrite adds an annotation change for target, the object with
// uid, from seen (the value in the snapshot) to value; value "" removes.
func (x *decider) addParentWrite(target ObjectRef, uid types.UID, key, seen, value, reason string) {
	x.addSideWrite(SideWrite{Target: target, TargetUID: uid}, key, seen, value, reason)
}

// addDeferredParentWrite is addParentWrite for a change made only after
// the unbound-status delay, on the target with uid (SideWrite.Deferred).
func (x *decider) addDeferredParentWrite(target ObjectRef, uid types.UID, key, seen, value, reason string) {
	x.addSideWrite(SideWrite{Target: target, Deferred: true, TargetUID: uid, Delay: x.in.UnboundStatusRecordDelay, Writer: x.user.Long}, key, seen, value, reason)
}

func (x *decider) addSideWrite(of SideWrite, key, seen, value, reason string) {
	d := x.d
	var sw *SideWrite
	for i := range d.ParentWrites {
		if d.ParentWrites[i].Target == of.Target && d.ParentWrites[i].TargetUID == of.TargetUID && d.ParentWrites[i].Deferred == of.Deferred {
			sw = &d.ParentWrites[i]
		}
	}
	if sw == nil {
		d.ParentWrites = append(d.ParentWrites, of)
		sw = &d.ParentWrites[len(d.ParentWrites)-1]
	}
	if sw.Seen == nil {
		sw.Seen = map[string]string{}
	}
	sw.Seen[key] = seen
	if value == "" {
		sw.Remove = append(sw.Remove, key)
	} else {
		if sw.Set == nil {
			sw.Set = map[string]string{}
		}
		sw.Set[key] = value
	}
	sw.Reasons = append(sw.Reasons, reason)
}

// writeChild computes the child's annotations for an allowed write with a
// desired-state change. controller selects the controller compute function;
// extend makes the trace a hop on the parent's trace instead of an origin.
func (x *decider) writeChild(controller, extend bool) {
	in, d := x.in, x.d
	if in.Operation == Delete || in.NewObject == nil {
		return
	}
	labelsFrom := x.newAnn
	if controller {
		labelsFrom = x.oldAnn
	}
	hop := trace.Hop{
		APIVersion: d.Child.APIVersion,
		Kind:       d.Child.Kind,
		Name:       d.Child.Name,
		Generation: x.hopGeneration(),
		User:       d.Actor.User,
		Timestamp:  x.now,
		Labels:     trace.Labels(labelsFrom),
	}
	var tr string
	if extend {
		var err error
		tr, err = trace.Extend(x.parAnn[annotations.Trace], &hop)
		if err != nil {
			x.warn(annotations.Warning{Annotation: annotations.Trace, Err: err, Effect: "trace restarted at this object"},
				"parent "+x.parent.String())
		}
	} else {
		tr = trace.Origin(&hop)
	}
	d.Trace, d.TraceOrigin = tr, !extend
	updaters, _ := controllerid.AddHashValue(x.oldAnn[annotations.Updaters], x.userHash)
	var out map[string]string
	if controller {
		out = ComputeAnnotationsForController(x.oldAnn, x.newAnn, true, tr, updaters)
	} else {
		out = ComputeAnnotationsForUser(x.oldAnn, x.newAnn, true, tr, updaters)
	}
	d.ChildAnnotations = diffAnnotations(x.newAnn, out)
}

// hopGeneration predicts the child's generation after the write: 1 on
// CREATE; stored+1 on an UPDATE that changes the desired state.
func (x *decider) hopGeneration() int64 {
	switch x.in.Operation {
	case Create:
		return 1
	case Delete:
		if x.in.OldObject != nil {
			return x.in.OldObject.GetGeneration()
		}
		return 0
	}
	if x.in.OldObject != nil && x.in.OldObject.GetGeneration() > 0 {
		return x.in.OldObject.GetGeneration() + 1
	}
	return x.in.NewObject.GetGeneration()
}

// statusWrite: a status-subresource write records, on the written object
// itself, the writer as controller (user-hash fallback, only when the
// object has no managedFields owner of status.observedGeneration and the
// write does not set it), the lifecycle high-water mark, and the observed
// generation for objects that do not report one.
func (x *decider) statusWrite() {
	in, d := x.in, x.d
	d.Category = StatusWrite
	d.Reason = "status subresource write: records controller identity and lifecycle only"
	if x.guardStatusAnnotations() {
		return
	}
	target := d.Child
	stored := x.oldAnn
	if in.OldObject == nil {
		stored = x.newAnn
	}
	obj := in.NewObject
	if obj == nil {
		obj = in.OldObject
	}
	if obj == nil {
		return
	}
	x.recordStatusWriter(false)
	if stored[annotations.Phase] != annotations.PhaseInitialized {
		if lc := in.Lifecycle.Detect(obj); lc.Phase == lifecycle.Initialized && lc.Persist {
			x.addParentWrite(target, x.writtenUID(), annotations.Phase, stored[annotations.Phase], annotations.PhaseInitialized,
				"persist lifecycle high-water mark ("+lc.Reason+")")
		}
	}
	if !lifecycle.HasStatusObservedGeneration(obj) {
		x.recordObservedGeneration(target, stored, obj)
	}
}

// recordObservedGeneration records, for a kind that reports no observed
// generation, the generation its status write landed on: at once when the
// write names its resourceVersion, else deferred (SideWrite.Deferred).
func (x *decider) recordObservedGeneration(target ObjectRef, stored map[string]string, obj *unstructured.Unstructured) {
	in := x.in
	gen := obj.GetGeneration()
	if in.OldObject != nil {
		gen = in.OldObject.GetGeneration()
	}
	g := itoa(gen)
	if gen <= 0 || stored[annotations.ObservedGeneration] == g {
		return
	}
	reason := "record observed generation (no status.observedGeneration)"
	if in.NamesResourceVersion {
		x.addParentWrite(target, x.writtenUID(), annotations.ObservedGeneration, stored[annotations.ObservedGeneration], g, reason)
		return
	}
	x.addDeferredParentWrite(target, x.writtenUID(), annotations.ObservedGeneration, stored[annotations.ObservedGeneration], g,
		reason+", deferred: the status write names no resourceVersion, so its writer may not have seen generation "+g+" yet")
}

// writtenUID is the uid of the written object as stored, for the side
// writes on it. A side write lands only on the object the decision saw,
// never on one deleted and created again under the same name meanwhile,
// which is another object with annotations of its own.
func (x *decider) writtenUID() types.UID {
	written := x.in.NewObject
	if written == nil {
		written = x.in.OldObject
	}
	if written == nil {
		return ""
	}
	return storedUID(x.in.OldObject, written)
}

// parentUID is the uid of the parent snapshot, for the side writes on it.
func (x *decider) parentUID() types.UID {
	if x.in.Parent == nil {
		return ""
	}
	return x.in.Parent.GetUID()
}

// storedUID is the uid of the object as stored: a write's body may leave
// its uid out (kube-apiserver fills it in), or name another.
func storedUID(old, written *unstructured.Unstructured) types.UID {
	if old != nil {
		return old.GetUID()
	}
	return written.GetUID()
}

// recordStatusWriter records the writer as the written object's controller
// when its write advances the object's observed generation (only once the
// stored generation has reached it). reported: the observed generation
// counts only as the object reports it; a write of an object itself
// (status written with it) is recorded only then, since a kind that
// reports none would otherwise record whoever writes it.
func (x *decider) recordStatusWriter(reported bool) {
	in, d := x.in, x.d
	if reported && (in.NewObject == nil || !reportsObservedGeneration(in.NewObject)) {
		return
	}
	observed, advances := advancesObservedGeneration(in.OldObject, in.NewObject, in.ObservedGenerationPending)
	if !advances {
		return
	}
	target := d.Child
	stored := x.oldAnn
	if in.OldObject == nil {
		stored = x.newAnn
	}
	shape := "status write"
	if !in.StatusWrite {
		shape = "write of the object (its status has no subresource)"
	}
	v, changed, refusal := controllerid.RecordController(stored[annotations.Controllers], x.user)
	switch {
	case refusal != "":
		d.Warnings = append(d.Warnings, "kausality: "+d.Actor.User+" is not recorded in "+annotations.Controllers+" of "+target.String()+
			": "+refusal+"; if it is the new controller, a person resets the record with `kubectl kausality reset-controllers`")
	case changed:
		x.addParentWrite(target, x.writtenUID(), annotations.Controllers, stored[annotations.Controllers], v,
			"record "+d.Actor.User+" as controller: its "+shape+" advanced observedGeneration to "+itoa(observed)+" (only once the stored generation has reached it)")
		x.d.ParentWrites[x.parentWriteIndex(target, x.writtenUID())].Controller = &ControllerRecord{User: x.user, ObservedGeneration: observed}
	}
}

// reportsObservedGeneration reports whether obj says which generation its
// controller observed, in its status or in a condition.
func reportsObservedGeneration(obj *unstructured.Unstructured) bool {
	_, source, known := lifecycle.ObservedGeneration(obj)
	return known && source != lifecycle.SourceAnnotation
}

// advancesObservedGeneration reports whether a status write moves the
// object's observed generation forward, and to which generation: only its
// controller does that. A kind that reports none is observed at its
// generation by every status write (the proxy records it in an
// annotation).
func advancesObservedGeneration(old, new *unstructured.Unstructured, pending int64) (int64, bool) {
	if old == nil || new == nil {
		return 0, false
	}
	before, _, known := lifecycle.ObservedGeneration(old)
	if !lifecycle.HasStatusObservedGeneration(new) && pending > before {
		// Recorded already, only not yet written.
		before, known = pending, true
	}
	after := old.GetGeneration()
	if lifecycle.HasStatusObservedGeneration(new) {
		after, _, _ = lifecycle.ObservedGeneration(new)
	}
	return after, after > 0 && (!known || after > before)
}

// kausalityDiffers reports whether the kausality annotations of a and b differ.
func kausalityDiffers(a, b map[string]string) bool {
	for k, v := range a {
		if annotations.IsKausality(k) {
			if w, ok := b[k]; !ok || w != v {
				return true
			}
		}
	}
	for k := range b {
		if annotations.IsKausality(k) {
			if _, ok := a[k]; !ok {
				return true
			}
		}
	}
	return false
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// addsUpdater reports whether d records a writer in the updaters record
// that the stored object's lacks. The record is the stored one with the
// writer's hash added: written on another version, it would drop a hash
// added there meanwhile (another writer's, through another replica).
func addsUpdater(d *Decision, old *unstructured.Unstructured) bool {
	if d.ChildAnnotations == nil || old == nil {
		return false
	}
	v, set := d.ChildAnnotations.Set[annotations.Updaters]
	return set && v != old.GetAnnotations()[annotations.Updaters]
}

// DeleteChangesDeleting reports whether kube-apiserver would change obj,
// which is being deleted already, on another delete with options o: a
// shorter grace period than the pending one, or a propagation whose
// finalizers (orphan, foregroundDeletion) differ from obj's, which the
// generic registry writes (deletionFinalizersForGarbageCollection) and
// which decide whether the garbage collector deletes obj's dependents.
func DeleteChangesDeleting(obj *unstructured.Unstructured, o *metav1.DeleteOptions) bool {
	if o == nil {
		return false
	}
	if g := obj.GetDeletionGracePeriodSeconds(); g != nil && *g > 0 && o.GracePeriodSeconds != nil && *o.GracePeriodSeconds < *g {
		return true
	}
	//nolint:staticcheck // SA1019: kube-apiserver still honours orphanDependents
	orphanOpt := o.OrphanDependents
	if orphanOpt == nil && o.PropagationPolicy == nil {
		return false // the object's own finalizers decide, unchanged
	}
	orphan, foreground := false, false
	if orphanOpt != nil {
		orphan = *orphanOpt
	} else {
		orphan = *o.PropagationPolicy == metav1.DeletePropagationOrphan
		foreground = *o.PropagationPolicy == metav1.DeletePropagationForeground
	}
	fs := obj.GetFinalizers()
	return orphan != slices.Contains(fs, metav1.FinalizerOrphanDependents) || foreground != slices.Contains(fs, metav1.FinalizerDeleteDependents)
}
