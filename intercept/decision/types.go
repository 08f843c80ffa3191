package decision

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/history"
	"github.com/kausality-io/kausality-proxy/intercept/lifecycle"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// Operation of the intercepted write.
type Operation string

// Operations. PATCH and PUT are UPDATE; /scale writes are UPDATEs of the
// owning object.
const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
	Delete Operation = "DELETE"
)

// Result of a decision.
type Result string

// Results.
const (
	Allow Result = "Allow"
	Deny  Result = "Deny"
)

// Category says which branch decided.
type Category string

// Categories.
const (
	// StatusWrite: a status-subresource write; only records controller
	// identity and lifecycle on the written object.
	StatusWrite Category = "StatusWrite"
	// NoDesiredChange: only metadata and/or status change.
	NoDesiredChange Category = "NoDesiredChange"
	// NoParent: no controller ownerReference; a new trace starts here.
	NoParent Category = "NoParent"
	// ParentDeleting: the parent has a deletionTimestamp.
	ParentDeleting Category = "ParentDeleting"
	// ParentInitializing: the parent is not initialized yet.
	ParentInitializing Category = "ParentInitializing"
	// Frozen: the parent has kausality.io/freeze. Denied.
	Frozen Category = "Frozen"
	// NewOrigin: another actor than the parent's controller.
	NewOrigin Category = "NewOrigin"
	// ControllerUnknown: nothing tells who the parent's controller is yet
	// (a new parent before its first status write); lenient: allowed, no
	// drift check, a hop of the parent's trace.
	ControllerUnknown Category = "ControllerUnknown"
	// Expected: the controller carries out a spec change of its parent
	// (the parent has not settled at its current spec).
	Expected Category = "Expected"
	// HistoryPruned: the controller deletes, under a settled parent, a
	// retired revision (a scaled-down ReplicaSet, a ControllerRevision)
	// beyond the parent's revisionHistoryLimit: it carries out that spec
	// field.
	HistoryPruned Category = "HistoryPruned"
	// SelfHealing: the controller writes, under a settled parent, a child
	// of a kind it replaces by design (Pods, by default); traced, not
	// gated.
	SelfHealing Category = "SelfHealing"
	// DriftApproved: drift with a valid approval.
	DriftApproved Category = "DriftApproved"
	// DriftApprovedByPolicy: drift without an approval annotation that a
	// rule of an ApprovalPolicy (or ClusterApprovalPolicy) of the writer
	// matches.
	DriftApprovedByPolicy Category = "DriftApprovedByPolicy"
	// DriftRejected: drift with a matching rejection (or malformed
	// rejections). Denied in every mode.
	DriftRejected Category = "DriftRejected"
	// DriftUnapproved: drift without approval: denied in enforce mode,
	// allowed with a warning in log mode.
	DriftUnapproved Category = "DriftUnapproved"
	// OwnControlsRefused: the written object's own controller changes
	// its approvals, rejections, freeze, snooze or mode. Denied.
	OwnControlsRefused Category = "OwnControlsRefused"
	// StatusAnnotationsRefused: a status write changes kausality.io
	// annotations people set. Denied.
	StatusAnnotationsRefused Category = "StatusAnnotationsRefused"
)

// ModeSource says which level chose the mode.
type ModeSource string

// Mode sources, most specific first.
const (
	ModeFromObject     ModeSource = "object"
	ModeFromNamespace  ModeSource = "namespace"
	ModeFromController ModeSource = "controller"
	ModeFromDefault    ModeSource = "default"
)

// ReportPhase says which DriftReport, if any, to send.
type ReportPhase string

// Report phases.
const (
	ReportNone     ReportPhase = ""
	ReportDetected ReportPhase = "Detected"
	ReportResolved ReportPhase = "Resolved"
)

// ObjectRef names an object.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// String renders "apps/v1 Deployment ns/name" ("v1 Namespace name" when
// cluster-scoped).
func (r ObjectRef) String() string {
	var b strings.Builder
	b.WriteString(r.APIVersion)
	b.WriteByte(' ')
	b.WriteString(r.Kind)
	b.WriteByte(' ')
	if r.Namespace != "" {
		b.WriteString(r.Namespace)
		b.WriteByte('/')
	}
	b.WriteString(r.Name)
	return b.String()
}

// RefOf returns the reference of obj.
func RefOf(obj *unstructured.Unstructured) ObjectRef {
	if obj == nil {
		return ObjectRef{}
	}
	return ObjectRef{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// changeText renders "spec.replicas (1 → 3)", or "spec.template" when the
// values are not shown.
func changeText(c desired.Change) string {
	if c.Old == "" && c.New == "" {
		return c.Path
	}
	return c.Path + " (" + orNone(c.Old) + " → " + orNone(c.New) + ")"
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// ModeInputs are the mode settings below the object level. The object
// level is read from Input.OldObject (the stored object) only, so a write
// cannot downgrade itself.
type ModeInputs struct {
	// Namespace is the kausality.io/mode annotation of the child's
	// namespace ("" = unset).
	Namespace string
	// NamespaceModesBy is the namespace's kausality.io/modes-by: who set
	// its mode through the proxy.
	NamespaceModesBy string
	// Controller is the per-controller mode from the config ("" = unset).
	Controller string
	// Default is the global default (--default-mode); "" means log.
	Default annotations.DriftMode
}

// Input is everything Decide needs. Nothing in it is modified.
type Input struct {
	Operation Operation
	// Child is the written object. For a CREATE with generateName and no
	// name, Decide uses the generateName as the name.
	Child ObjectRef
	// OldObject is the stored object (nil on CREATE).
	OldObject *unstructured.Unstructured
	// NewObject is the effective new object (nil on DELETE).
	NewObject *unstructured.Unstructured
	// DeleteOptions are a DELETE's options, from its body or query (nil:
	// none).
	DeleteOptions *metav1.DeleteOptions
	// DesiredChanged: the write changes the desired state (spec, or for
	// spec-less kinds everything outside metadata and status). CREATE and
	// DELETE always count as a desired-state change.
	DesiredChanged bool
	// Changes lists the changed fields, for messages.
	Changes []desired.Change
	// StatusWrite: a write to the status subresource.
	StatusWrite bool
	// StatusInObject: the written object has no status subresource (a
	// custom resource whose CRD declares none), so its controller reports
	// status through writes of the object itself, which record it as a
	// status write would.
	StatusInObject bool
	// ScaleWrite: a write to the /scale subresource. Its body has no room
	// for the object's annotations.
	ScaleWrite bool
	// WrittenPaths, when set, are the desired-state paths an update of a
	// child known only by its metadata can change, read from its patch
	// (allowance.WrittenPaths); WrittenCoarse: some of them stand for a
	// whole map or list.
	WrittenPaths  []string
	WrittenCoarse bool
	// Parent is the snapshot of the controller owner (nil = no ownerRef
	// with controller: true).
	Parent *unstructured.Unstructured
	// User is the effective user.
	User user.Info
	// UserHashes are User's hashes (controllerid.UserOf), when the caller
	// has them: hashing is the costliest part of reading who the writer
	// is, and one request is decided more than once.
	UserHashes *controllerid.User
	// FieldManager is the effective field manager (the fieldManager query
	// parameter, else the apiserver default derived from the User-Agent).
	FieldManager string
	// Mode holds the namespace, per-controller and default modes.
	Mode ModeInputs
	// DryRun: dryRun=All. Same decision, no side effects: no approval is
	// consumed, no parent is written, no report is sent.
	DryRun bool
	// Now is the clock (zero = time.Now()).
	Now time.Time
	// Lifecycle is the detection order; nil = default.
	Lifecycle *lifecycle.Detector
	// Settle says whether the parent has settled at its current spec. nil
	// falls back to generation numbers alone: a controller's write is
	// expected while generation != observedGeneration.
	Settle *settle.Facts
	// NoChangeIsCertain: if the proxy finds no desired-state change, a
	// stale copy of the object cannot be hiding one: a PUT that carries
	// the resourceVersion of the object it was computed on (kube-apiserver
	// refuses it on any other), or a patch that touches only metadata and
	// status. Such a verdict needs no confirmation.
	NoChangeIsCertain bool
	// ParentHidden: the caller may not read Parent. Messages and warnings
	// then name neither the parent nor what its annotations say (a
	// freeze's reason, a rejection's), only what to do.
	ParentHidden bool
	// ObjectLive: OldObject was read live, not from a cache or a copy.
	ObjectLive bool
	// NamesControls: the write is a patch that could set or remove one of
	// the object's controls whatever OldObject holds (it names one, or
	// replaces the annotations whole). A copy of the object a beat behind
	// may not hold the control a person has just set, which the patch then
	// removes although it changes nothing of that copy.
	NamesControls bool
	// NamesResourceVersion: the client's write names the resourceVersion
	// it was made on (a PUT's metadata.resourceVersion, or a patch that
	// sets or tests it). kube-apiserver stores it only on that version, so
	// its writer read the object as stored; a write that names none is
	// applied to whatever is stored, however old its writer's copy.
	NamesResourceVersion bool
	// ObservedGenerationPending is the generation a deferred record of
	// this object waits to record (SideWrite.Deferred; this replica's
	// memory), 0 when none waits: a status write after the one that asked
	// for it observes nothing new up to it, so it records no new
	// controller.
	ObservedGenerationPending int64
	// UnboundStatusRecordDelay is how long a deferred record of this
	// object's observed generation waits (SideWrite.Delay): the written
	// kind's setting in the config file, else the proxy's flag.
	UnboundStatusRecordDelay time.Duration
	// ApplyWithoutSchema: a server-side apply of a kind whose schema the
	// proxy lacks (a custom resource): its result was computed with a
	// schema deduced from the objects, which merges keyed lists and
	// atomic fields otherwise than kube-apiserver, which has the CRD's.
	ApplyWithoutSchema bool
	// StaleUpdate: a PUT naming a resourceVersion other than OldObject's.
	// kube-apiserver refuses it with a conflict, so the annotations it
	// carries are an old copy, not an edit.
	StaleUpdate bool
	// Confirmed: OldObject and NewObject are what kube-apiserver stores
	// and would store (a live read and a server-side dry run), not the
	// proxy's computation.
	Confirmed bool
	// UngatedKinds are child kinds whose controller writes under a settled
	// parent are traced but never gated (SelfHealing).
	UngatedKinds []UngatedKind
	// OwnedRevisions are the revisions of the child's kind that the
	// parent controls (nil when not gathered): on a DELETE of a
	// ReplicaSet or ControllerRevision they tell history pruning from
	// drift (see intercept/history).
	OwnedRevisions []history.Revision
	// Policies matches the write against the approval policies that
	// apply to the writer (see policy). Compiled ahead, from informer
	// caches: matching them does no I/O, and the same write is matched
	// once per request, within one budget. nil: no policies.
	Policies *policy.Matcher
}

// Update reports whether the write updates a stored object (create and
// delete verdicts do not rest on a computed object).
func (in *Input) Update() bool { return in.Operation == Update }

// ParentInfo describes the parent as seen in the snapshot.
type ParentInfo struct {
	Ref                ObjectRef `json:"ref"`
	UID                string    `json:"uid,omitempty"`
	ResourceVersion    string    `json:"resourceVersion,omitempty"`
	Generation         int64     `json:"generation"`
	ObservedGeneration int64     `json:"observedGeneration"`
	// ObservedGenerationSource: status.observedGeneration, a condition,
	// the kausality.io/observedGeneration annotation, or "" if unknown.
	ObservedGenerationSource string          `json:"observedGenerationSource,omitempty"`
	Phase                    lifecycle.Phase `json:"phase"`
	PhaseReason              string          `json:"phaseReason,omitempty"`
}

// Actor describes who wrote.
type Actor struct {
	User         string `json:"user"`
	UserHash     string `json:"userHash"`
	FieldManager string `json:"fieldManager,omitempty"`
	// IsController: the parent's controller (only meaningful with a parent).
	IsController bool `json:"isController"`
	// Determined is false when the controller could not be identified.
	Determined bool                `json:"determined"`
	Method     controllerid.Method `json:"method,omitempty"`
	// ControllerManagers own the parent's status.observedGeneration.
	ControllerManagers []string `json:"controllerManagers,omitempty"`
	Reason             string   `json:"reason,omitempty"`
}

// SnoozeState is the parent's snooze.
type SnoozeState struct {
	// Snoozed: notifications are suppressed now.
	Snoozed    bool      `json:"snoozed"`
	Until      time.Time `json:"until,omitzero"`
	Annotation string    `json:"annotation,omitempty"`
}

// ApprovalsUpdate is the reservation of a once approval: rewrite the
// parent's kausality.io/approvals from Old to New with a resourceVersion
// precondition BEFORE forwarding the write; if the upstream rejects the
// write, put Old back (if unchanged since).
type ApprovalsUpdate struct {
	Target          ObjectRef `json:"target"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	Old             string    `json:"old"`
	// New is the new value; "" means remove the annotation.
	New      string            `json:"new"`
	Consumed approval.Approval `json:"consumed"`
	// ConsumedRaw is the consumed entry as written; Restore puts it back
	// in that form.
	ConsumedRaw json.RawMessage     `json:"-"`
	Pruned      []approval.Approval `json:"pruned,omitempty"`
}

// Restore returns the approvals value current with the consumed entry put
// back, as written, after the write it was reserved for was refused.
// Every other entry stays as written. changed is false when the entry is
// back already. A current value that is not a JSON array is an error: it
// is never rewritten, and the approval stays taken.
func (u *ApprovalsUpdate) Restore(current string) (value string, changed bool, err error) {
	entries, _, ok := annotations.ParseApprovalEntries(current)
	if !ok {
		return current, false, errors.New("the parent's " + annotations.Approvals + " annotation is not a JSON array")
	}
	for _, e := range entries {
		if e.Valid && e.Approval == u.Consumed {
			return current, false, nil
		}
	}
	back := annotations.NewApprovalEntry(u.Consumed)
	if len(u.ConsumedRaw) > 0 {
		back.Raw = u.ConsumedRaw
	}
	return annotations.EncodeApprovalEntries(append(entries, back)), true, nil
}

// SideWrite is an annotation patch of another object, done by the proxy
// with its own field manager AFTER the write succeeded.
type SideWrite struct {
	Target ObjectRef `json:"target"`
	AnnotationChanges
	// Reasons says why ("record controller", "persist phase", ...).
	Reasons []string `json:"reasons"`
	// Seen holds, per changed key, the value the decision saw: the write
	// is redone from fresh state (Rebase) when the target changed since.
	Seen map[string]string `json:"-"`
	// Controller is the user a controllers change records, with the
	// observedGeneration its status write reported.
	Controller *ControllerRecord `json:"controller,omitempty"`
	// Deferred: made only once the writer's copy of the target can no
	// longer predate what the write is credited with (the proxy's
	// unbound-status delay after the write), and only on the target with
	// TargetUID. A status write that names no resourceVersion may have been
	// computed before the latest spec change; recording the generation it
	// landed on at once would settle the parent at a spec its controller
	// has not acted on yet.
	Deferred  bool      `json:"deferred,omitempty"`
	TargetUID types.UID `json:"targetUID,omitempty"`
	// Writer is the user hash of the writer whose write asked for a
	// deferred write: what waits is shared out among writers.
	Writer string `json:"-"`
	// Delay is how long a deferred write waits after the write that asked
	// for it (Input.UnboundStatusRecordDelay); 0 makes it at once.
	Delay time.Duration `json:"delay,omitempty"`
}

// ControllerRecord is the user a status write records as controller.
type ControllerRecord struct {
	User controllerid.User `json:"user"`
	// ObservedGeneration is what the status write reported. The user is
	// recorded only when kube-apiserver stores the target at this
	// generation or later: anybody who may write status can report a
	// generation that was never observed, and only the controller can
	// observe one that exists.
	ObservedGeneration int64 `json:"observedGeneration"`
}

// Decision is the outcome of Decide.
type Decision struct {
	Result   Result   `json:"result"`
	Category Category `json:"category"`
	// Reason is a one-line summary for logs.
	Reason string `json:"reason"`
	// Drift: the controller writes while its parent is settled at its
	// spec, whatever the outcome.
	Drift bool `json:"drift"`
	// ConfirmWithServer: the verdict rests on the object the proxy computed
	// (the cached object with the write applied). It must be decided again
	// on what kube-apiserver will store (a live read of the object and a
	// server-side dry run of the same write) before it is acted on.
	ConfirmWithServer bool `json:"confirmWithServer,omitempty"`
	// RecheckController: the write changes the object's approvals,
	// rejections, freeze, snooze or mode, and the copy of the object it
	// was decided on does not name the writer as its controller. It must
	// be decided again on a live read of the object: a cache that has not
	// seen the record yet must not let the controller through.
	RecheckController bool `json:"recheckController,omitempty"`
	// OnStoredVersion: the write changes system annotations that the
	// child annotations put back to the stored object's values. Those
	// values are only as new as the copy the write was decided on, so the
	// write must land on that copy's resourceVersion: a value the proxy
	// wrote meanwhile (a reservation, a controller record) would otherwise
	// be overwritten with an older one.
	OnStoredVersion bool `json:"onStoredVersion,omitempty"`
	// AlreadyDeleting: the verdict rests on the stored object being
	// deleted already, so that deleting it again changes nothing. A
	// cache may still show an object that is gone and created again
	// under its name, so the verdict stands only on a live read.
	AlreadyDeleting bool `json:"alreadyDeleting,omitempty"`
	// OwnControlsEdited: a write refused for another reason is also an
	// edit of the object's controls by its own controller.
	OwnControlsEdited bool `json:"ownControlsEdited,omitempty"`
	// ApprovalsSetAside counts the parent's approvals that only its own
	// controller gave, which do not approve the drift.
	ApprovalsSetAside int `json:"approvalsSetAside,omitempty"`

	Mode       annotations.DriftMode `json:"mode,omitempty"`
	ModeSource ModeSource            `json:"modeSource,omitempty"`

	Child  ObjectRef   `json:"child"`
	Parent *ParentInfo `json:"parent,omitempty"`
	Actor  Actor       `json:"actor"`

	// Approval is the approval that allowed drift.
	Approval *approval.Approval `json:"approval,omitempty"`
	// Rejection is the rejection that denied drift.
	Rejection *approval.Rejection `json:"rejection,omitempty"`
	// Freeze is the parent's freeze (Frozen).
	Freeze *annotations.FreezeInfo `json:"freeze,omitempty"`
	// Policy is the ApprovalPolicy rule that approved drift
	// (DriftApprovedByPolicy), or that a new origin matched (a rule with
	// newOrigins; the write is allowed anyway).
	Policy *policy.Hit `json:"policy,omitempty"`
	// PoliciesEvaluated names the policies tried for drift or a new
	// origin.
	PoliciesEvaluated []policy.Ref `json:"policiesEvaluated,omitempty"`
	// PolicyProblems are policy evaluations that exceeded the cost limit
	// or the write's budget, for the policies' status.
	PolicyProblems []policy.EvalProblem `json:"-"`
	// Suggested is the approval that would allow this drift.
	Suggested *approval.Approval `json:"suggested,omitempty"`

	// ConsumeOnce: a once approval is used; apply ApprovalsUpdate before
	// forwarding. Never set on dry-run.
	ConsumeOnce     bool             `json:"consumeOnce,omitempty"`
	ApprovalsUpdate *ApprovalsUpdate `json:"approvalsUpdate,omitempty"`

	Snooze SnoozeState `json:"snooze"`
	// Report says which DriftReport to send (none on dry-run, Detected
	// suppressed while snoozed).
	Report ReportPhase `json:"report,omitempty"`

	// Warnings for Warning: 299 headers: malformed annotations, drift
	// allowed in log mode.
	Warnings []string `json:"warnings,omitempty"`

	// ChildAnnotations: apply to the new object before forwarding (nil =
	// unchanged). Only on Allow; never on DELETE.
	ChildAnnotations *AnnotationChanges `json:"childAnnotations,omitempty"`
	// AnnotationsAhead: write to the object with the proxy's credentials,
	// under a resourceVersion precondition, before the write is forwarded
	// (nil = nothing). They are the allowances of a /scale write, which
	// its body cannot carry and which its controller may use as soon as
	// it sees the /scale.
	AnnotationsAhead *AnnotationChanges `json:"annotationsAhead,omitempty"`
	// Trace is the child's trace after the write ("" if not rewritten);
	// TraceOrigin says whether it starts a new chain.
	Trace       string `json:"trace,omitempty"`
	TraceOrigin bool   `json:"traceOrigin,omitempty"`

	// ParentWrites are done after the write succeeded (not on dry-run).
	// On a status write the target is the written object itself.
	ParentWrites []SideWrite `json:"parentWrites,omitempty"`

	// Message explains a denial; also set for drift allowed in log mode
	// (what enforce mode would have said), for shadow/log lines.
	Message string `json:"message,omitempty"`
	// Causes carry the same details for tools (Status details.causes).
	Causes []metav1.StatusCause `json:"causes,omitempty"`

	// Allowances is what the allowance check found (nil: not applied).
	Allowances *AllowanceOutcome `json:"allowances,omitempty"`
}

// String renders the decision as JSON (for logs and debugging).
func (d *Decision) String() string {
	b, _ := json.Marshal(d)
	return string(b)
}

// Status cause types used in Decision.Causes.
const (
	CauseParent       metav1.CauseType = "KausalityParent"
	CauseChild        metav1.CauseType = "KausalityChild"
	CauseController   metav1.CauseType = "KausalityController"
	CauseChangedField metav1.CauseType = "KausalityChangedField"
	CauseFrozen       metav1.CauseType = "KausalityFrozen"
	CauseRejected     metav1.CauseType = "KausalityRejected"
	CauseUnapproved   metav1.CauseType = "KausalityUnapproved"
	// CausePolicy: Message names the ApprovalPolicy rule that matched, or
	// says that none did.
	CausePolicy metav1.CauseType = "KausalityPolicy"
	// CauseUnblock: Field names the parent annotation, Message the action
	// or the full value to set.
	CauseUnblock metav1.CauseType = "KausalityUnblock"
	// CauseControlAnnotation: Field names a kausality.io annotation the
	// write may not change.
	CauseControlAnnotation metav1.CauseType = "KausalityAnnotation"
)
