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
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// ParentObject is the object reference of a report's parent.
func ParentObject(p v1alpha1.ParentRef) decision.ObjectRef {
	return decision.ObjectRef{APIVersion: p.APIVersion, Kind: p.Kind, Namespace: p.Namespace, Name: p.Name}
}

// ChildObject is the object reference of a report's child.
func ChildObject(c v1alpha1.ChildRef) decision.ObjectRef {
	return decision.ObjectRef{APIVersion: c.APIVersion, Kind: c.Kind, Namespace: c.Namespace, Name: c.Name}
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
func FromDecision(d *decision.Decision, w Write) v1alpha1.DriftReport {
	r := v1alpha1.DriftReport{APIVersion: v1alpha1.DriftReportAPIVersion, Kind: v1alpha1.DriftReportKind}
	s := &r.Spec
	s.Phase = v1alpha1.DriftReportPhase(d.Report)
	if s.Allowances = AllowanceVerdict(d); s.Allowances != nil && d.Report == decision.ReportNone {
		// A write that is no drift but mutates what nothing allowed is
		// reported as a drift of its own.
		s.Phase = v1alpha1.PhaseDetected
	}
	if p := d.Parent; p != nil {
		s.Parent = v1alpha1.ParentRef{
			APIVersion: p.Ref.APIVersion, Kind: p.Ref.Kind, Namespace: p.Ref.Namespace, Name: p.Ref.Name,
			UID: p.UID, Generation: p.Generation, ObservedGeneration: p.ObservedGeneration,
			LifecyclePhase: string(p.Phase),
		}
		s.Parent.ControllerManager = strings.Join(d.Actor.ControllerManagers, ",")
		if s.Parent.ControllerManager == "" && d.Actor.IsController {
			s.Parent.ControllerManager = d.Actor.FieldManager
		}
	}
	s.Child = v1alpha1.ChildRef{APIVersion: d.Child.APIVersion, Kind: d.Child.Kind, Namespace: d.Child.Namespace, Name: d.Child.Name}
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
	s.Request = v1alpha1.RequestInfo{FieldManager: w.FieldManager, Operation: string(w.Operation), DryRun: w.DryRun}
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
	if s.Phase == v1alpha1.PhaseDetected {
		s.ID = ID(ParentObject(s.Parent), ChildObject(s.Child), s.Changes)
	}
	return r
}

// MaxAllowanceViolations bounds the violations a report carries: one per
// mutated field, and a write may change many.
const MaxAllowanceViolations = 32

// AllowanceVerdict is what a report says about the allowance check of d:
// the mutations nothing allowed, when the mode reports them (log and
// enforce; shadow only logs). nil otherwise.
func AllowanceVerdict(d *decision.Decision) *v1alpha1.AllowanceVerdict {
	a := d.Allowances
	if a == nil || len(a.Violations) == 0 || (a.Mode != allowance.ModeLog && a.Mode != allowance.ModeEnforce) {
		return nil
	}
	v := &v1alpha1.AllowanceVerdict{Mode: string(a.Mode)}
	for i, x := range a.Violations {
		if i == MaxAllowanceViolations {
			break
		}
		v.Violations = append(v.Violations, v1alpha1.AllowanceViolation{Field: x.Mutation, NeededKind: x.NeededKind, NeededMutation: x.NeededMutation})
	}
	return v
}

// ObjectOf is the object a report holds in e (its OldObject or NewObject),
// however it holds it: an object in process, JSON after a round trip. nil
// if none.
func ObjectOf(e runtime.RawExtension) *unstructured.Unstructured {
	if u, ok := e.Object.(*unstructured.Unstructured); ok && u != nil {
		return u
	}
	raw := e.Raw
	if e.Object != nil {
		b, err := json.Marshal(e.Object)
		if err != nil {
			return nil
		}
		raw = b
	}
	if len(raw) == 0 {
		return nil
	}
	var m map[string]any
	// utiljson keeps integers int64, as unstructured reads them.
	if utiljson.Unmarshal(raw, &m) != nil || m == nil {
		return nil
	}
	return &unstructured.Unstructured{Object: m}
}
