package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

// API identification of a DriftReport.
const (
	DriftReportAPIVersion = Group + "/" + Version
	DriftReportKind       = "DriftReport"
)

// DriftReportPhase says whether a DriftReport opens or closes a drift.
type DriftReportPhase string

// Phases of a DriftReport.
const (
	PhaseDetected DriftReportPhase = "Detected"
	PhaseResolved DriftReportPhase = "Resolved"
)

// Resolution reasons (DriftReportSpec.Reason of a Resolved report).
const (
	// ReasonApproved: an approval on the parent now allows the drift.
	ReasonApproved = "Approved"
	// ReasonParentChanged: the parent's generation moved on (its spec
	// changed), so the write is no longer drift.
	ReasonParentChanged = "ParentChanged"
	// ReasonChildDeleted: the drifted child was deleted.
	ReasonChildDeleted = "ChildDeleted"
)

// DriftReport is POSTed to the drift webhook endpoints. It is a transient
// type: TypeMeta only, no ObjectMeta, and no CRD: receivers decode the body,
// kube-apiserver never stores it.
type DriftReport struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       DriftReportSpec `json:"spec"`
}

// DriftReportSpec is the body of a DriftReport. The field names follow the
// Kausality design's DriftReport; Changes and Reason are additions.
type DriftReportSpec struct {
	// ID is hex(sha256(parent, child, diff))[:16]. A Resolved report
	// carries the id of the Detected report it closes.
	ID    string           `json:"id"`
	Phase DriftReportPhase `json:"phase"`
	// Reason says why a Resolved report was sent (ReasonApproved, ...).
	Reason string `json:"reason,omitempty"`

	Parent ParentRef `json:"parent"`
	Child  ChildRef  `json:"child"`

	// OldObject is the stored object (UPDATE and DELETE; optional).
	OldObject runtime.RawExtension `json:"oldObject,omitzero"`
	// NewObject is the written object. Required by the seed; it is null
	// for DELETE and for a Resolved report triggered without an object.
	NewObject runtime.RawExtension `json:"newObject"`

	Request RequestInfo `json:"request"`

	// Changes are the changed desired-state fields (path, old → new for
	// scalars, truncated). A Resolved report repeats the changes of the
	// Detected report it closes.
	Changes []Change `json:"changes,omitempty"`

	// Allowances is set when the write mutated fields no allowance on the
	// parent covers, in allowance-mode log or enforce: the report is then
	// about those mutations, whether or not the write was drift.
	Allowances *AllowanceVerdict `json:"allowances,omitempty"`
}

// AllowanceVerdict is what the allowance check found wrong with a write.
type AllowanceVerdict struct {
	// Mode is the allowance mode the write was decided in: log or enforce.
	Mode string `json:"mode"`
	// Violations are the mutations no usable allowance covered.
	Violations []AllowanceViolation `json:"violations"`
}

// AllowanceViolation is one mutation nothing allowed, and the allowance
// the parent would have to carry for it.
type AllowanceViolation struct {
	// Field is the mutated field path of the child's desired state, or
	// create or delete.
	Field string `json:"field"`
	// NeededKind and NeededMutation name the missing allowance: an entry
	// {kind, mutation} in the parent's kausal.io/allowances.
	NeededKind     string `json:"neededKind"`
	NeededMutation string `json:"neededMutation"`
}

// ParentRef describes the parent as seen when the report was made.
type ParentRef struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Namespace          string `json:"namespace,omitempty"`
	Name               string `json:"name"`
	UID                string `json:"uid,omitempty"`
	Generation         int64  `json:"generation"`
	ObservedGeneration int64  `json:"observedGeneration"`
	// ControllerManager is the field manager of the parent's controller
	// (comma-separated if several own status.observedGeneration).
	ControllerManager string `json:"controllerManager,omitempty"`
	// LifecyclePhase is Initializing, Initialized or Deleting.
	LifecyclePhase string `json:"lifecyclePhase,omitempty"`
}

// ChildRef describes the written object.
type ChildRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
	Generation int64  `json:"generation,omitempty"`
}

// RequestInfo describes the write.
type RequestInfo struct {
	User         string   `json:"user"`
	Groups       []string `json:"groups,omitempty"`
	UID          string   `json:"uid,omitempty"`
	FieldManager string   `json:"fieldManager,omitempty"`
	Operation    string   `json:"operation,omitempty"`
	DryRun       bool     `json:"dryRun"`
}

// Change is one changed desired-state field of a drift, as a DriftReport
// and the drift ledger carry it.
type Change struct {
	// Path is the field, e.g. "spec.replicas", "data.key",
	// `data["config.yaml"]`, "spec.template.spec.containers[name=app].image",
	// "rules[0].verbs".
	Path string `json:"path"`
	// Old and New are the values rendered as JSON (strings quoted),
	// truncated; "<unset>" when absent; redacted for Secret data.
	// Both are empty where the values are not to be shown.
	Old string `json:"old,omitempty"`
	New string `json:"new,omitempty"`
}

func (c Change) String() string { return c.Path + ": " + c.Old + " → " + c.New }
