// Package lifecycle decides the lifecycle phase of a parent: Deleting,
// Initializing or Initialized, and where its observedGeneration comes from.
//
// Order of decision:
//  1. metadata.deletionTimestamp set: Deleting (never stored);
//  2. the high-water mark kausality.io/phase: initialized (or the legacy
//     kausality.io/initialized: "true"): Initialized;
//  3. the configured checks, in order (per GVK; default DefaultOrder):
//     Initialized=True, Ready=True, then an observed generation present
//     (status.observedGeneration, a Ready or Synced condition's, or the
//     kausality.io/observedGeneration the proxy records from the status
//     writes of a kind that reports none) together with Ready, Available or
//     Initialized = True (so a Deployment is initialized once it is
//     Available, and so is an operator's resource that reports only an
//     Available condition), then kstatus readiness Current
//     with status.observedGeneration (StatefulSets, DaemonSets, Jobs);
//  4. otherwise Initializing.
//
// Once a parent is Initialized it stays so: Result.Persist says the
// high-water mark must be written.
package lifecycle

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// Phase of a parent.
type Phase string

// Phases.
const (
	Deleting     Phase = "Deleting"
	Initializing Phase = "Initializing"
	Initialized  Phase = "Initialized"
)

// Check is one initialization check. "Condition=<Type>" is satisfied by a
// status condition of that type with status "True"; ObservedGeneration is
// satisfied by status.observedGeneration together with Ready, Available or
// Initialized = True.
type Check string

// Checks.
const (
	CheckInitialized        Check = "Condition=Initialized"
	CheckReady              Check = "Condition=Ready"
	CheckObservedGeneration Check = "ObservedGeneration"
	// CheckObservedGenerationCurrent is satisfied once status.observedGeneration
	// has caught up with metadata.generation, whatever the conditions. It is
	// for kinds that report no readiness condition at all (a ReplicaSet), and
	// is not in the default order.
	CheckObservedGenerationCurrent Check = "ObservedGenerationCurrent"
	// CheckCurrent is satisfied when the object reports
	// status.observedGeneration equal to its generation and its kstatus
	// readiness is Current: a StatefulSet, DaemonSet, ReplicaSet or Job that
	// has finished rolling out, which reports no Ready condition.
	CheckCurrent Check = "Current"
)

// DefaultOrder is the default detection order after the annotation.
var DefaultOrder = []Check{CheckInitialized, CheckReady, CheckObservedGeneration, CheckCurrent}

// Validate reports whether c is a known check.
func (c Check) Validate() error {
	if c == CheckObservedGeneration || c == CheckObservedGenerationCurrent || c == CheckCurrent {
		return nil
	}
	if t, ok := strings.CutPrefix(string(c), "Condition="); ok && t != "" {
		return nil
	}
	return fmt.Errorf("unknown initialization check %q (want ObservedGeneration, ObservedGenerationCurrent or Condition=<Type>)", string(c))
}

// Detector holds the detection order.
type Detector struct {
	// Order is the default order; nil means DefaultOrder.
	Order []Check
	// ByGVK overrides the order per kind. A key with an empty Version
	// matches every version of the group and kind.
	ByGVK map[schema.GroupVersionKind][]Check
}

// Result of Detect.
type Result struct {
	Phase Phase
	// Reason says what decided ("deletionTimestamp set", "condition
	// Ready=True", ...).
	Reason string
	// Persist: Initialized but the high-water mark is not stored yet; write
	// kausality.io/phase: initialized to the object.
	Persist bool
}

// Detect uses the default order.
func Detect(obj *unstructured.Unstructured) Result { return (*Detector)(nil).Detect(obj) }

func (d *Detector) order(obj *unstructured.Unstructured) []Check {
	if d == nil {
		return DefaultOrder
	}
	if len(d.ByGVK) > 0 {
		gvk := obj.GroupVersionKind()
		if o, ok := d.ByGVK[gvk]; ok {
			return o
		}
		gvk.Version = ""
		if o, ok := d.ByGVK[gvk]; ok {
			return o
		}
	}
	if d.Order != nil {
		return d.Order
	}
	return DefaultOrder
}

// Detect returns the phase of obj.
func (d *Detector) Detect(obj *unstructured.Unstructured) Result {
	if obj == nil {
		return Result{Phase: Initialized, Reason: "no object"}
	}
	if obj.GetDeletionTimestamp() != nil {
		return Result{Phase: Deleting, Reason: "deletionTimestamp set"}
	}
	ann := obj.GetAnnotations()
	if ann[annotations.Phase] == annotations.PhaseInitialized {
		return Result{Phase: Initialized, Reason: "annotation " + annotations.Phase + "=" + annotations.PhaseInitialized}
	}
	if ann[annotations.LegacyInitialized] == "true" {
		return Result{Phase: Initialized, Reason: "annotation " + annotations.LegacyInitialized + "=true", Persist: true}
	}
	status, _ := obj.Object["status"].(map[string]interface{})
	for _, c := range d.order(obj) {
		if c == CheckCurrent {
			if _, ok := statusObservedGeneration(status); ok {
				if current, why := settle.Current(obj); current {
					return Result{Phase: Initialized, Reason: "readiness " + why, Persist: true}
				}
			}
			continue
		}
		if c == CheckObservedGenerationCurrent {
			if g, ok := statusObservedGeneration(status); ok && g >= obj.GetGeneration() && obj.GetGeneration() > 0 {
				return Result{Phase: Initialized, Reason: "status.observedGeneration caught up with metadata.generation", Persist: true}
			}
			continue
		}
		if c == CheckObservedGeneration {
			if ok, why := observedAndAvailable(obj, status); ok {
				return Result{Phase: Initialized, Reason: why, Persist: true}
			}
			continue
		}
		if ok, why := check(status, c); ok {
			return Result{Phase: Initialized, Reason: why, Persist: true}
		}
	}
	return Result{Phase: Initializing, Reason: "no initialization signal"}
}

// observedAndAvailable is the ObservedGeneration check: an observed
// generation in any dialect (status.observedGeneration, a Ready or Synced
// condition's, or the one the proxy records from the status writes of a
// kind that reports none, as the operator-sdk's samples do) together with a
// Ready, Available or Initialized condition that is True.
func observedAndAvailable(obj *unstructured.Unstructured, status map[string]interface{}) (bool, string) {
	if status == nil {
		return false, ""
	}
	_, source, ok := ObservedGeneration(obj)
	if !ok {
		return false, ""
	}
	for _, t := range [...]string{"Ready", "Available", "Initialized"} {
		if conditionTrue(status, t) {
			return true, source + " with condition " + t + "=True"
		}
	}
	return false, ""
}

func check(status map[string]interface{}, c Check) (bool, string) {
	if status == nil {
		return false, ""
	}
	if t, ok := strings.CutPrefix(string(c), "Condition="); ok && t != "" && conditionTrue(status, t) {
		return true, "condition " + t + "=True"
	}
	return false, ""
}

func conditionTrue(status map[string]interface{}, condType string) bool {
	conds, _ := status["conditions"].([]interface{})
	for _, c := range conds {
		m, _ := c.(map[string]interface{})
		if m == nil {
			continue
		}
		if t, _ := m["type"].(string); t == condType {
			s, _ := m["status"].(string)
			return s == "True"
		}
	}
	return false
}

// ConditionTrue reports whether obj has status condition condType = True.
func ConditionTrue(obj *unstructured.Unstructured, condType string) bool {
	status, _ := obj.Object["status"].(map[string]interface{})
	return status != nil && conditionTrue(status, condType)
}

func toInt64(v interface{}) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case float64:
		return int64(n), n == float64(int64(n))
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

func statusObservedGeneration(status map[string]interface{}) (int64, bool) {
	v, ok := status["observedGeneration"]
	if !ok {
		return 0, false
	}
	return toInt64(v)
}

// ObservedGeneration sources.
const (
	SourceStatus     = "status.observedGeneration"
	SourceCondition  = "status.conditions[].observedGeneration"
	SourceAnnotation = annotations.ObservedGeneration
)

// ObservedGeneration returns the generation the controller last observed:
// status.observedGeneration; else the observedGeneration of the Synced (then
// Ready) condition (Crossplane); else the kausality.io/observedGeneration
// annotation. ok is false when none is present.
func ObservedGeneration(obj *unstructured.Unstructured) (gen int64, source string, ok bool) {
	if obj == nil {
		return 0, "", false
	}
	status, _ := obj.Object["status"].(map[string]interface{})
	if status != nil {
		if g, ok := statusObservedGeneration(status); ok {
			return g, SourceStatus, true
		}
		if g, ok := conditionObservedGeneration(status); ok {
			return g, SourceCondition, true
		}
	}
	if v, has := obj.GetAnnotations()[annotations.ObservedGeneration]; has {
		if g, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			return g, SourceAnnotation, true
		}
	}
	return 0, "", false
}

// StatusObservedGeneration returns status.observedGeneration of obj.
func StatusObservedGeneration(obj *unstructured.Unstructured) (int64, bool) {
	if obj == nil {
		return 0, false
	}
	status, _ := obj.Object["status"].(map[string]interface{})
	if status == nil {
		return 0, false
	}
	return statusObservedGeneration(status)
}

// HasStatusObservedGeneration reports whether obj reports its observed
// generation itself (status field or condition), so the annotation is not
// needed.
func HasStatusObservedGeneration(obj *unstructured.Unstructured) bool {
	_, src, ok := ObservedGeneration(obj)
	return ok && src != SourceAnnotation
}

func conditionObservedGeneration(status map[string]interface{}) (int64, bool) {
	conds, _ := status["conditions"].([]interface{})
	var ready int64
	var haveReady bool
	for _, c := range conds {
		m, _ := c.(map[string]interface{})
		if m == nil {
			continue
		}
		t, _ := m["type"].(string)
		if t != "Synced" && t != "Ready" {
			continue
		}
		g, ok := toInt64(m["observedGeneration"])
		if !ok {
			continue
		}
		if t == "Synced" {
			return g, true
		}
		ready, haveReady = g, true
	}
	return ready, haveReady
}
