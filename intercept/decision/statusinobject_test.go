package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// A custom resource whose CRD has no status subresource reports its
// status through writes of the object itself. Its controller is recorded
// from those, as from a status write: otherwise it would stay the field
// manager that owns status.observedGeneration, which the caller names, and
// the operator's drift under another field manager would be a new origin.
func TestAParentWithoutAStatusSubresourceRecordsItsController(t *testing.T) {
	const operator = "system:serviceaccount:widgets:widget-operator"
	widget := func(observed int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]interface{}{
				"name": "web", "namespace": "default", "uid": "p-uid", "resourceVersion": "100", "generation": int64(5),
				"annotations": map[string]interface{}{annotations.Trace: parentTrace, annotations.Phase: "initialized"},
				"managedFields": []interface{}{
					map[string]interface{}{"manager": "widget-operator", "operation": "Update", "fieldsType": "FieldsV1",
						"fieldsV1": map[string]interface{}{"f:status": map[string]interface{}{"f:observedGeneration": map[string]interface{}{}}}},
				},
			},
			"spec": map[string]interface{}{"replicas": int64(3)},
			"status": map[string]interface{}{"observedGeneration": observed,
				"conditions": []interface{}{map[string]interface{}{"type": "Ready", "status": "True", "observedGeneration": observed}}},
		}}
	}
	// 1. The operator reports generation 5 observed, through the main
	// resource (the only way this CRD has).
	reportStatus := func(statusInObject bool, old, new *unstructured.Unstructured) string {
		d := Decide(Input{
			Operation: Update, Child: ObjectRef{APIVersion: "example.com/v1", Kind: "Widget", Namespace: "default", Name: "web"},
			OldObject: old, NewObject: new, StatusInObject: statusInObject,
			User: &user.DefaultInfo{Name: operator}, FieldManager: "widget-operator",
			Mode: ModeInputs{Default: annotations.ModeEnforce}, Now: now,
		})
		for _, w := range d.ParentWrites {
			if v, ok := w.AnnotationChanges.Set[annotations.Controllers]; ok {
				return v
			}
		}
		return ""
	}
	if v := reportStatus(false, widget(4), widget(5)); v != "" {
		t.Errorf("a write of an object whose status has a subresource recorded its writer: %s", v)
	}
	unreported := func(observed int64) *unstructured.Unstructured {
		w := widget(observed)
		unstructured.RemoveNestedField(w.Object, "status")
		_ = unstructured.SetNestedField(w.Object, "Ready", "status", "phase")
		return w
	}
	if v := reportStatus(true, unreported(4), unreported(5)); v != "" {
		t.Errorf("a write of an object that reports no observed generation recorded its writer: %s", v)
	}
	if v := reportStatus(true, widget(5), widget(5)); v != "" {
		t.Errorf("a write that does not advance the observed generation recorded its writer: %s", v)
	}
	record := reportStatus(true, widget(4), widget(5))
	if record == "" {
		t.Fatal("the operator's write of its Widget advancing observedGeneration did not record it as controller")
	}
	// 2. The operator's drift on its child under the settled Widget, with
	// another field manager.
	in := base()
	in.Parent = widget(5)
	in.Parent.SetAnnotations(map[string]string{annotations.Trace: parentTrace, annotations.Phase: "initialized", annotations.Controllers: record})
	in.OldObject = mkChild(1, func(u *unstructured.Unstructured) {
		u.SetOwnerReferences(nil)
		_ = unstructured.SetNestedSlice(u.Object, []interface{}{map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget", "name": "web", "uid": "p-uid", "controller": true}}, "metadata", "ownerReferences")
	})
	in.NewObject = mkChild(3, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(u.Object, []interface{}{map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget", "name": "web", "uid": "p-uid", "controller": true}}, "metadata", "ownerReferences")
	})
	in.User = &user.DefaultInfo{Name: operator}
	in.FieldManager = "widget-operator"
	asItself := Decide(in)
	in.FieldManager = "kubectl-edit"
	d := Decide(in)
	if asItself.Result != Deny {
		t.Fatalf("control: the operator's drift under its own field manager: %s %s, want Deny", asItself.Result, asItself.Category)
	}
	if d.Result != Deny {
		t.Fatalf("the operator's drift with fieldManager=kubectl-edit: %s %s (%s), want it held as under its own field manager",
			d.Result, d.Category, d.Actor.Reason)
	}
}
