package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// API identification of a DriftReport.
const (
	APIVersion = "kausality.io/v1alpha1"
	Kind       = "DriftReport"
)

// Phase of a DriftReport.
type Phase string

// Phases.
const (
	PhaseDetected Phase = "Detected"
	PhaseResolved Phase = "Resolved"
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
// type: TypeMeta only, no ObjectMeta.
type DriftReport struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       DriftReportSpec `json:"spec"`
}

// DriftReportSpec is the body of a DriftReport. The field names follow the
// Kausality design's DriftReport; Changes and Reason are additions.
type DriftReportSpec struct {
	// ID is hex(sha256(parent, child, diff))[:16]; see ID. A Resolved
	// report carries the id of the Detected report it closes.
	ID    string `json:"id"`
	Phase Phase  `json:"phase"`
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
	Changes []desired.Change `json:"changes,omitempty"`
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

// Ref returns the object reference of the parent.
func (p ParentRef) Ref() decision.ObjectRef {
	return decision.ObjectRef{APIVersion: p.APIVersion, Kind: p.Kind, Namespace: p.Namespace, Name: p.Name}
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

// Ref returns the object reference of the child.
func (c ChildRef) Ref() decision.ObjectRef {
	return decision.ObjectRef{APIVersion: c.APIVersion, Kind: c.Kind, Namespace: c.Namespace, Name: c.Name}
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

// ID is the content id of a drift: the first 16 hex digits of the sha256
// of the parent, the child and the canonical diff. The references use the
// API group, not the version, so the same drift written through another
// version of the API has the same id. The diff is canonical: the changes
// are sorted (by path, old, new) and duplicates count once, so the order in
// which fields were compared does not matter.
//
// Two drifts of the same pair with the same (truncated) rendered changes
// have the same id; for non-scalar fields only the path is rendered.
func ID(parent, child decision.ObjectRef, changes []desired.Change) string {
	cs := slices.Clone(changes)
	slices.SortFunc(cs, func(a, b desired.Change) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		if c := strings.Compare(a.Old, b.Old); c != 0 {
			return c
		}
		return strings.Compare(a.New, b.New)
	})
	cs = slices.Compact(cs)
	// JSON quoting makes the encoding unambiguous whatever the strings hold.
	canon := struct {
		P [4]string   `json:"p"`
		C [4]string   `json:"c"`
		D [][3]string `json:"d"`
	}{P: idRef(parent), C: idRef(child), D: make([][3]string, len(cs))}
	for i, c := range cs {
		canon.D[i] = [3]string{c.Path, c.Old, c.New}
	}
	b, _ := json.Marshal(canon) // cannot fail: strings only
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

func idRef(r decision.ObjectRef) [4]string {
	return [4]string{groupOf(r.APIVersion), r.Kind, r.Namespace, r.Name}
}

// groupOf returns the API group of an apiVersion ("" for the core group).
func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return apiVersion
	}
	return gv.Group
}

// Write is what the write path knows besides the decision.
type Write struct {
	Operation decision.Operation
	// OldObject is the stored object (nil on CREATE).
	OldObject *unstructured.Unstructured
	// NewObject is the effective new object (nil on DELETE).
	NewObject *unstructured.Unstructured
	// Changes are the changed desired-state fields (decision.Input.Changes).
	Changes []desired.Change
	// User is the effective user.
	User user.Info
	// FieldManager is the effective field manager.
	FieldManager string
	// DryRun: dryRun=All. Nothing is reported for dry-run writes.
	DryRun bool
}

// FromDecision builds the report of a decided write. The phase is
// d.Report ("" when the decision asks for no report); the id is computed
// from the parent, the child and w.Changes. The objects are referenced,
// not copied: they are serialized by Sender.Enqueue (and only if the report
// is actually queued), so they must not be modified before that returns.
// A Secret's values are redacted (redactSecrets), in copies.
func FromDecision(d *decision.Decision, w Write) DriftReport {
	r := DriftReport{APIVersion: APIVersion, Kind: Kind}
	s := &r.Spec
	s.Phase = Phase(d.Report)
	if p := d.Parent; p != nil {
		s.Parent = ParentRef{
			APIVersion: p.Ref.APIVersion, Kind: p.Ref.Kind, Namespace: p.Ref.Namespace, Name: p.Ref.Name,
			UID: p.UID, Generation: p.Generation, ObservedGeneration: p.ObservedGeneration,
			LifecyclePhase: string(p.Phase),
		}
		s.Parent.ControllerManager = strings.Join(d.Actor.ControllerManagers, ",")
		if s.Parent.ControllerManager == "" && d.Actor.IsController {
			s.Parent.ControllerManager = d.Actor.FieldManager
		}
	}
	s.Child = ChildRef{APIVersion: d.Child.APIVersion, Kind: d.Child.Kind, Namespace: d.Child.Namespace, Name: d.Child.Name}
	for _, o := range []*unstructured.Unstructured{w.NewObject, w.OldObject} {
		if o != nil && o.GetUID() != "" {
			s.Child.UID, s.Child.Generation = string(o.GetUID()), o.GetGeneration()
			break
		}
	}
	if w.OldObject != nil {
		s.OldObject.Object = w.OldObject
	}
	if w.NewObject != nil {
		s.NewObject.Object = w.NewObject
	}
	s.Request = RequestInfo{FieldManager: w.FieldManager, Operation: string(w.Operation), DryRun: w.DryRun}
	if s.Request.FieldManager == "" {
		s.Request.FieldManager = d.Actor.FieldManager
	}
	if w.User != nil {
		s.Request.User, s.Request.Groups, s.Request.UID = w.User.GetName(), w.User.GetGroups(), w.User.GetUID()
	} else {
		s.Request.User = d.Actor.User
	}
	s.Changes = w.Changes
	redactSecrets(s)
	if s.Phase == PhaseDetected {
		s.ID = ID(s.Parent.Ref(), s.Child.Ref(), s.Changes)
	}
	return r
}
