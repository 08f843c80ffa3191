package decision

// Allowances beside drift gating: after Decide has said whether a write
// may happen at all, the allowance check says whether this write's
// mutations follow from the change of the parent that started them. It
// only ever holds more: a write Decide denies stays denied.

import (
	"context"
	"errors"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
)

// CauseAllowance is the cause of an allowance violation: Field names the
// mutated field (or create, delete) that no allowance covers, Message the
// allowance that would be needed.
const CauseAllowance metav1.CauseType = "KausalityAllowance"

// AllowanceInputs is what the allowance check needs beyond Input.
type AllowanceInputs struct {
	// Policies are the compiled AllowancePolicies, invalid ones included
	// (they apply to nothing).
	Policies []*allowance.Compiled
	// NamespaceAnnotations are the annotations of the written object's
	// namespace (its allowance mode).
	NamespaceAnnotations map[string]string
	// ObjectSettledGeneration is the latest generation at which the
	// written object was seen settled (0: unknown), for pruning the
	// allowances it carries.
	ObjectSettledGeneration int64
}

// AllowanceOutcome is what the allowance check found, for the decision
// line and the reports.
type AllowanceOutcome struct {
	Mode allowance.Mode `json:"mode"`
	// Checked: a controller's write was checked against its parent's
	// allowances (or its standing duty). Such a verdict depends on what
	// the write changes: it stands on the child's metadata alone only
	// when StandsOnWrite.
	Checked bool `json:"checked,omitempty"`
	// StandsOnWrite: the write was checked on the paths its patch can
	// change (Input.WrittenPaths), every one was allowed, and what it
	// passes on depends on nothing else, so the whole child would decide
	// it alike.
	StandsOnWrite bool                      `json:"-"`
	Justification []allowance.Justification `json:"justification,omitempty"`
	Violations    []allowance.Violation     `json:"violations,omitempty"`
	// Granted names the policies whose allowances the write adds to the
	// written object; Pruned counts the consumed allowances it drops.
	Granted    []string `json:"granted,omitempty"`
	Pruned     int      `json:"pruned,omitempty"`
	Unfinished string   `json:"unfinished,omitempty"`
	// Problems are evaluations the policies' status should report.
	Problems []allowance.EvalProblem `json:"-"`
}

// DecideAllowances applies the allowance check to d, decided by Decide on
// in. ctx bounds the CEL evaluations to the request.
func DecideAllowances(ctx context.Context, d Decision, in Input, a AllowanceInputs) Decision {
	d = allowancesAhead(decideAllowances(ctx, d, in, a), in)
	if in.Update() && !in.Confirmed && d.Allowances != nil && d.Allowances.Checked && in.ApplyWithoutSchema {
		// The mutations come from a merge made without the kind's schema:
		// a keyed list or an atomic field may lose entries kube-apiserver
		// removes and the proxy's merge keeps, or the other way round.
		// Whatever the verdict, it stands on kube-apiserver's result.
		d.ConfirmWithServer = true
	}
	if in.Update() && !in.Confirmed && d.Allowances != nil && len(d.Allowances.Violations) > 0 &&
		(in.StaleUpdate || leavesOutViolated(in, d.Allowances.Violations)) {
		// Confirmed on what kube-apiserver would store, when the write may
		// not change what it seems to. A controller that writes from a
		// cache a beat behind sends an old copy of the object, whose
		// fields differ from the stored ones without anyone having changed
		// them (kube-apiserver refuses such a PUT with a conflict, which
		// the controller retries on fresh state); one that rebuilds the
		// spec leaves out fields kube-apiserver defaults back. Neither is
		// reported as a violation. A write with any other violation stands
		// on the write itself, and its body never goes upstream.
		d.ConfirmWithServer = true
	}
	return d
}

func decideAllowances(ctx context.Context, d Decision, in Input, a AllowanceInputs) Decision {
	if d.Result == Deny {
		return d
	}
	if d.Category == StatusWrite || d.Category == NoDesiredChange || !in.DesiredChanged {
		return prune(d, in, a)
	}
	switch {
	case d.Category == NewOrigin || d.Category == NoParent:
		return initiate(ctx, d, in, a)
	case AllowanceCheckOf(d.Category) == NoAllowanceCheck:
		return prune(d, in, a)
	case in.Parent == nil || !governed(a.Policies, parentGroup(in), in.Parent.GetKind()):
		return d
	}
	return use(ctx, d, in, a)
}

// AllowanceCheck is the check a controller's write of a child gets under
// a governed parent, by its drift verdict.
type AllowanceCheck int

const (
	// NoAllowanceCheck is for a verdict that is not a controller acting
	// for its parent.
	NoAllowanceCheck AllowanceCheck = iota
	// UsesAllowances is for a write that carries out a change of the
	// parent: each mutation needs an unconsumed allowance on the parent
	// whose policy names the controller.
	UsesAllowances
	// StandingDuty is for a write that is a standing duty of the parent
	// (healing, pruning its history): it needs no allowance, but a valid
	// policy of the parent's kind that names the controller must allow
	// the mutation.
	StandingDuty
)

// AllowanceCheckOf is the check a write with the drift verdict category
// gets: the proxy applies it, and the kubectl plugin explains it.
func AllowanceCheckOf(c Category) AllowanceCheck {
	switch c {
	case Expected, ParentInitializing, ControllerUnknown:
		return UsesAllowances
	case SelfHealing, HistoryPruned:
		return StandingDuty
	}
	return NoAllowanceCheck
}

// allowancesAhead moves the allowances a /scale write gives the scaled
// object out of the annotations that follow the write into those written
// before it. The scaled object's controller acts on the /scale as soon as
// it sees it; allowances that arrived after it would make its first
// writes violations.
func allowancesAhead(d Decision, in Input) Decision {
	if !in.ScaleWrite || d.Result == Deny || d.ChildAnnotations.Empty() {
		return d
	}
	value, set := d.ChildAnnotations.Set[allowance.Annotation]
	removed := slices.Contains(d.ChildAnnotations.Remove, allowance.Annotation)
	if !set && !removed {
		return d
	}
	after := &AnnotationChanges{Set: map[string]string{}}
	for k, v := range d.ChildAnnotations.Set {
		if k != allowance.Annotation {
			after.Set[k] = v
		}
	}
	for _, k := range d.ChildAnnotations.Remove {
		if k != allowance.Annotation {
			after.Remove = append(after.Remove, k)
		}
	}
	ahead := &AnnotationChanges{}
	if set {
		ahead.Set = map[string]string{allowance.Annotation: value}
	} else {
		ahead.Remove = []string{allowance.Annotation}
	}
	d.AnnotationsAhead = ahead
	d.ChildAnnotations = nil
	if !after.Empty() {
		d.ChildAnnotations = after
	}
	return d
}

// generationAfter is the generation the write gives its object. A /scale
// write whose allowances are written ahead of it follows that annotation
// write, and kube-apiserver counts an annotation change of a Deployment
// as a generation of its own (it copies them to its ReplicaSets); other
// kinds count only changes of their spec (custom resources: of anything
// but metadata).
func generationAfter(in Input, group, kind string) int64 {
	if in.OldObject == nil {
		return 1
	}
	g := in.OldObject.GetGeneration() + 1
	if in.ScaleWrite && AnnotationWriteBumpsGeneration(group, kind) {
		g++
	}
	return g
}

// AnnotationWriteBumpsGeneration reports whether kube-apiserver gives an
// object of the kind a new generation when only its annotations change.
func AnnotationWriteBumpsGeneration(group, kind string) bool {
	return group == "apps" && kind == "Deployment"
}

// governed reports whether a valid policy speaks of changes of the group
// and kind. The children of a parent no policy speaks of (a Service's
// EndpointSlices) are not checked: nothing could ever allow their writes,
// and turning allowances on for a namespace would stop every such
// controller.
func governed(policies []*allowance.Compiled, group, kind string) bool {
	for _, p := range policies {
		if p.Targets(group, kind) {
			return true
		}
	}
	return false
}

// parentGroup is the API group of the written child's parent: its
// snapshot's, or, when the snapshot does not say, the one the child's
// controller reference names.
func parentGroup(in Input) string {
	if av := in.Parent.GetAPIVersion(); av != "" {
		return groupOf(av)
	}
	for _, obj := range []*unstructured.Unstructured{in.NewObject, in.OldObject} {
		if obj == nil {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.UID == in.Parent.GetUID() {
			return groupOf(ref.APIVersion)
		}
	}
	return ""
}

func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// prune drops the consumed allowances of an object other writes carry,
// so the annotation does not grow with allowances nothing can use.
func prune(d Decision, in Input, a AllowanceInputs) Decision {
	if in.Operation != Update || in.OldObject == nil || in.NewObject == nil {
		return d
	}
	stored := in.OldObject.GetAnnotations()
	if stored[allowance.Annotation] == "" {
		return d
	}
	modeOn, nsModeOn, _ := allowanceModesAsPeopleSetThem(stored, a.NamespaceAnnotations, heldByObjectsController(stored), "object "+RefOf(in.OldObject).String(), in.Child.Namespace)
	mode, _ := allowance.ModeOf(modeOn, nsModeOn)
	if mode == allowance.ModeOff {
		return d
	}
	out := &AllowanceOutcome{Mode: mode}
	d = carry(d, stored, a.ObjectSettledGeneration, nil, out)
	if out.Pruned > 0 {
		d.Allowances = out
	}
	return d
}

// initiate grants the allowances a person's (or CI's, or an autoscaler's)
// change of the object starts, on the forwarded write.
func initiate(ctx context.Context, d Decision, in Input, a AllowanceInputs) Decision {
	if in.Operation == Delete || in.NewObject == nil {
		return d
	}
	var stored map[string]string
	if in.OldObject != nil {
		stored = in.OldObject.GetAnnotations()
	}
	modeOn, nsModeOn, ignored := allowanceModesAsPeopleSetThem(stored, a.NamespaceAnnotations, heldByObjectsController(stored),
		"object "+RefOf(in.NewObject).String(), in.Child.Namespace)
	mode, warn := allowance.ModeOf(modeOn, nsModeOn)
	if mode == allowance.ModeOff {
		return d
	}
	d.Warnings = append(d.Warnings, ignored...)
	if warn != nil {
		d.Warnings = append(d.Warnings, warn.String())
	}
	apiVersion := in.Child.APIVersion
	if apiVersion == "" {
		apiVersion = in.NewObject.GetAPIVersion()
	}
	ch := allowance.Change{Subject: subjectOf(in), Group: groupOf(apiVersion), Kind: in.NewObject.GetKind(),
		Name: in.NewObject.GetName(), New: in.NewObject.Object}
	ch.Generation = generationAfter(in, ch.Group, ch.Kind)
	if in.OldObject != nil {
		ch.Old = in.OldObject.Object
	}
	g := allowance.Initiate(ctx, a.Policies, ch)
	out := &AllowanceOutcome{Mode: mode, Granted: g.Policies, Unfinished: g.Unfinished, Problems: g.Problems}
	d.Allowances = out
	return carry(d, stored, a.ObjectSettledGeneration, g.Allowances, out)
}

// use checks a controller's write of a child against the parent's
// allowances (or, for a standing duty, against the parent's policies),
// and passes on what the child's own policies grant.
func use(ctx context.Context, d Decision, in Input, a AllowanceInputs) Decision {
	parentAnn := in.Parent.GetAnnotations()
	modeOn, nsModeOn, ignored := AllowanceModesForController(in.Parent, a.NamespaceAnnotations, userHashesOf(in).Long)
	mode, warn := allowance.ModeOf(modeOn, nsModeOn)
	if mode == allowance.ModeOff {
		return d
	}
	d.Warnings = append(d.Warnings, ignored...)
	if warn != nil {
		d.Warnings = append(d.Warnings, warn.String())
	}
	ch := allowance.Change{Subject: subjectOf(in), Group: groupOf(in.Child.APIVersion), Kind: in.Child.Kind, Name: in.Child.Name}
	ch.Generation = generationAfter(in, ch.Group, ch.Kind)
	if in.OldObject != nil {
		ch.Old = in.OldObject.Object
	}
	if in.Operation != Delete && in.NewObject != nil {
		ch.New = in.NewObject.Object
	}
	if in.Operation == Delete {
		ch.New = nil
	}
	fromWrite := in.Operation == Update && in.WrittenPaths != nil && ch.Old != nil && ch.New != nil
	if fromWrite {
		ch.Written = in.WrittenPaths
	}
	var v allowance.Verdict
	if AllowanceCheckOf(d.Category) == StandingDuty || createUnderSettledSpec(d, in) {
		v = allowance.Standing(a.Policies, allowance.Duty{Group: parentGroup(in), Kind: in.Parent.GetKind(), Name: in.Parent.GetName(),
			Generation: in.Parent.GetGeneration(), Initiator: traceOrigin(parentAnn)}, ch)
	} else {
		set, err := allowance.Parse(parentAnn[allowance.Annotation])
		if err != nil {
			d.Warnings = append(d.Warnings, "parent "+in.Parent.GetKind()+" "+in.Parent.GetName()+": "+err.Error()+" (counted as no allowances)")
		}
		v = allowance.Use(a.Policies, allowance.Parent{Group: parentGroup(in), Kind: in.Parent.GetKind(), Name: in.Parent.GetName(),
			Allowances: set.Allowances, SettledGeneration: SettledGeneration(in.Parent, in)}, ch)
	}
	out := &AllowanceOutcome{Mode: mode, Checked: true, Justification: v.Justification, Violations: v.Violations}
	// A path of the patch no allowance covers may name a field set to
	// the value it has, and a coarse one may trigger the child's own
	// policies otherwise than the fields below it: the whole child
	// decides those.
	out.StandsOnWrite = fromWrite && v.Allowed() &&
		(!in.WrittenCoarse || !governed(a.Policies, ch.Group, ch.Kind)) &&
		!allowance.PropagationReadsContent(a.Policies, ch.Group, ch.Kind, ch.Subject)
	d.Allowances = out
	if !v.Allowed() {
		d = violated(d, mode, v.Violations)
		if d.Result == Deny {
			return d
		}
	}
	if in.Operation == Update && !out.StandsOnWrite && d.Result == Allow {
		// The mutations were read from the copy of the child the write
		// was decided on. A copy a beat behind may lack a person's edit
		// that the write reverts (a field it sets to the value the copy
		// still holds counts as unchanged): the write lands on that
		// copy's version, or is decided again on the child read live.
		d.OnStoredVersion = true
	}
	if ch.New == nil {
		return d
	}
	g := allowance.Propagate(ctx, a.Policies, v, ch)
	out.Granted, out.Unfinished, out.Problems = g.Policies, g.Unfinished, g.Problems
	var stored map[string]string
	if in.OldObject != nil {
		stored = in.OldObject.GetAnnotations()
	}
	return carry(d, stored, a.ObjectSettledGeneration, g.Allowances, out)
}

// createUnderSettledSpec: drift gating counts the parent as initializing
// (it reports no initialization signal, as a CronJob does), yet the parent
// has settled at its current spec, which consumed the allowances of that
// spec. A child its controller creates now, such as a CronJob's scheduled
// Job, carries out no change: it is held to the parent's standing duties,
// as re-creating an attempt is.
func createUnderSettledSpec(d Decision, in Input) bool {
	return d.Category == ParentInitializing && in.Operation == Create &&
		in.Parent.GetGeneration() > 0 && SettledGeneration(in.Parent, in) >= in.Parent.GetGeneration()
}

// violated decides a violation by the mode: shadow only records it (the
// decision line), log warns and reports, enforce denies and reports. A
// violation is reported as drift is: the people watching DriftReports are
// the ones who must learn that a controller did what nothing allowed.
func violated(d Decision, mode allowance.Mode, vs []allowance.Violation) Decision {
	msgs := make([]string, len(vs))
	for i, v := range vs {
		msgs[i] = v.Message
	}
	msg := "kausality-proxy: " + strings.Join(msgs, "; ")
	report := ReportNone
	if !d.Snooze.Snoozed {
		report = ReportDetected
	}
	switch mode {
	case allowance.ModeEnforce:
		d.Result, d.Reason, d.Message = Deny, "allowance violation", msg
		d.ChildAnnotations, d.ParentWrites, d.Trace = nil, nil, ""
		d.ConsumeOnce, d.ApprovalsUpdate, d.Report = false, nil, report
		causes := make([]metav1.StatusCause, 0, len(vs))
		for _, v := range vs {
			causes = append(causes, metav1.StatusCause{Type: CauseAllowance, Field: v.Mutation,
				Message: "needs an allowance {kind: " + v.NeededKind + ", mutation: " + v.NeededMutation + "} on the parent"})
		}
		d.Causes = append(causes, d.Causes...)
	case allowance.ModeLog:
		d.Warnings = append(d.Warnings, msg+" (allowance-mode log: allowed)")
		d.Report = report
	}
	return d
}

// carry sets the written object's kausal.io/allowances in the forwarded
// write: the stored ones without those consumed, plus granted.
func carry(d Decision, stored map[string]string, settledGeneration int64, granted []allowance.Allowance, out *AllowanceOutcome) Decision {
	raw, had := stored[allowance.Annotation]
	set, err := allowance.Parse(raw)
	if err != nil {
		d.Warnings = append(d.Warnings, err.Error()+" (counted as no allowances)")
	}
	set, pruned := allowance.Prune(set, settledGeneration)
	out.Pruned = len(pruned)
	if len(granted) == 0 && len(pruned) == 0 {
		return d
	}
	value, err := set.Add(granted...).String()
	if errors.Is(err, allowance.ErrTooLarge) {
		// Allowances only ever permit: forwarding without the new ones
		// holds the writes they would have allowed, nothing more.
		d.Warnings = append(d.Warnings, err.Error()+"; the write is forwarded without the allowances it would grant")
		value, err = set.String()
	}
	if err != nil {
		return d
	}
	if had && value == raw {
		return d
	}
	changes := &AnnotationChanges{Set: map[string]string{}}
	if d.ChildAnnotations != nil {
		for k, v := range d.ChildAnnotations.Set {
			changes.Set[k] = v
		}
		changes.Remove = append(changes.Remove, d.ChildAnnotations.Remove...)
	}
	if value == "" || value == "[]" {
		delete(changes.Set, allowance.Annotation)
		changes.Remove = appendMissing(changes.Remove, allowance.Annotation)
	} else {
		changes.Set[allowance.Annotation] = value
	}
	d.ChildAnnotations = changes
	return d
}

func appendMissing(keys []string, key string) []string {
	for _, k := range keys {
		if k == key {
			return keys
		}
	}
	return append(keys, key)
}

// SettledGeneration is the latest generation at which parent is known to
// have settled: its own when it has settled at its current spec, else the
// one the settledness facts recorded (0: never, which consumes nothing).
func SettledGeneration(parent *unstructured.Unstructured, in Input) int64 {
	if in.Settle == nil {
		return 0
	}
	if in.Settle.AtCurrentSpec {
		return parent.GetGeneration()
	}
	return in.Settle.SettledAt
}

// allowanceModesAsPeopleSetThem are an object's and its namespace's
// annotations with the allowance mode people set: one that a user held
// (the controller the check is about) set or removed through the proxy,
// before its status writes named it, does not decide how its writes are
// checked, and the value before it does.
func allowanceModesAsPeopleSetThem(ann, nsAnn map[string]string, held func(string) bool, object, namespace string) (objectModes, namespaceModes map[string]string, warnings []string) {
	asPeopleSetIt := func(ann map[string]string, object string) map[string]string {
		v, set, w := modeAsPeopleSetIt(ann, annotations.AllowanceMode, held, object, "how its writes are checked")
		if w == "" {
			return ann
		}
		warnings = append(warnings, w)
		out := make(map[string]string, len(ann))
		for k, val := range ann {
			if k != annotations.AllowanceMode {
				out[k] = val
			}
		}
		if set {
			out[annotations.AllowanceMode] = v
		}
		return out
	}
	objectModes = asPeopleSetIt(ann, object)
	namespaceModes = asPeopleSetIt(nsAnn, "namespace "+namespace)
	return objectModes, namespaceModes, warnings
}

// AllowanceModesForController are the parent's and the namespace's
// annotations as the allowance check of a write by the parent's
// controller (user hash writer) reads their allowance modes, with a
// warning for each mode it sets aside (see allowanceModesAsPeopleSetThem).
func AllowanceModesForController(parent *unstructured.Unstructured, nsAnn map[string]string, writer string) (parentModes, namespaceModes map[string]string, warnings []string) {
	parentAnn := parent.GetAnnotations()
	recorded := controllerid.ParseHashes(parentAnn[annotations.Controllers])
	held := func(u string) bool { return u == writer || controllerid.ContainsHash(recorded, u) }
	return allowanceModesAsPeopleSetThem(parentAnn, nsAnn, held, "parent "+RefOf(parent).String(), parent.GetNamespace())
}

// heldByObjectsController holds the users an object's
// kausality.io/controllers names: the allowances a person's change of the
// object grants are not switched off by a mode its controller set.
func heldByObjectsController(ann map[string]string) func(string) bool {
	recorded := controllerid.ParseHashes(ann[annotations.Controllers])
	return func(u string) bool { return controllerid.ContainsHash(recorded, u) }
}

// userHashesOf are the writer's user hashes.
func userHashesOf(in Input) controllerid.User {
	if in.UserHashes != nil {
		return *in.UserHashes
	}
	var name, uid string
	if in.User != nil {
		name, uid = in.User.GetName(), in.User.GetUID()
	}
	return controllerid.UserOf(controllerid.UserIdentifier(name, uid))
}

func subjectOf(in Input) allowance.Subject {
	if in.User == nil {
		return allowance.Subject{}
	}
	return allowance.Subject{User: in.User.GetName(), Groups: in.User.GetGroups()}
}

// traceOrigin is the user who started the parent's current desired state,
// as its trace records.
func traceOrigin(ann map[string]string) string {
	t, err := trace.Parse(ann[annotations.Trace])
	if err != nil || len(t) == 0 {
		return ""
	}
	return t[0].User
}

// AheadFollowing is d with the annotations it would write ahead of the
// write moved back to those that follow it, for a write they cannot go
// ahead of (a patch that names its own resourceVersion, which a write
// ahead of it would make fail).
func (d Decision) AheadFollowing() Decision {
	if d.AnnotationsAhead.Empty() {
		d.AnnotationsAhead = nil
		return d
	}
	after := &AnnotationChanges{Set: map[string]string{}}
	for _, c := range []*AnnotationChanges{d.ChildAnnotations, d.AnnotationsAhead} {
		if c == nil {
			continue
		}
		for k, v := range c.Set {
			after.Set[k] = v
		}
		after.Remove = append(after.Remove, c.Remove...)
	}
	d.ChildAnnotations, d.AnnotationsAhead = after, nil
	return d
}

// leavesOutViolated reports whether every violation is a field the write
// leaves out of the stored object: only kube-apiserver's defaulting can
// tell whether such a write changes it. A write with any other violation
// is refused on its own body, which then never goes upstream, not even as
// a dry run.
func leavesOutViolated(in Input, violations []allowance.Violation) bool {
	if in.OldObject == nil || in.NewObject == nil || len(violations) == 0 {
		return false
	}
	for _, v := range violations {
		if !allowance.LeftOut(in.OldObject.Object, in.NewObject.Object, v.Mutation) {
			return false
		}
	}
	return true
}
