package decision

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestComputeFunctions(t *testing.T) {
	old := map[string]string{
		"app":                       "web",
		"kausality.io/trace":        "old-trace",
		"kausality.io/updaters":     "aaaaa",
		"kausality.io/controllers":  "bbbbb",
		"kausality.io/phase":        "initialized",
		"kausality.io/mode":         "enforce",
		"kausality.io/trace-ticket": "T-1",
		"kausal.io/allowances":      "[stored allowances]",
	}
	// What a controller sends after copying its parent's annotations.
	copied := map[string]string{
		"app":                      "web-2",
		"kausality.io/trace":       "parent-trace",
		"kausality.io/controllers": "parent-controllers",
		"kausality.io/approvals":   "[parent approvals]",
		"kausality.io/mode":        "log",
		"kausal.io/allowances":     "[parent allowances]",
	}
	tests := []struct {
		name string
		got  map[string]string
		want map[string]string
	}{
		{"controller, desired change", ComputeAnnotationsForController(old, copied, true, "new-trace", "aaaaa,ccccc"), map[string]string{
			"app": "web-2", "kausality.io/trace": "new-trace", "kausality.io/updaters": "aaaaa,ccccc", "kausality.io/controllers": "bbbbb",
			"kausality.io/phase": "initialized", "kausality.io/mode": "enforce", "kausality.io/trace-ticket": "T-1", "kausal.io/allowances": "[stored allowances]"}},
		{"controller, no desired change", ComputeAnnotationsForController(old, copied, false, "ignored", "ignored"), map[string]string{
			"app": "web-2", "kausality.io/trace": "old-trace", "kausality.io/updaters": "aaaaa", "kausality.io/controllers": "bbbbb",
			"kausality.io/phase": "initialized", "kausality.io/mode": "enforce", "kausality.io/trace-ticket": "T-1", "kausal.io/allowances": "[stored allowances]"}},
		{"controller create", ComputeAnnotationsForController(nil, copied, true, "t", "u"), map[string]string{
			"app": "web-2", "kausality.io/trace": "t", "kausality.io/updaters": "u"}},
		{"user, desired change", ComputeAnnotationsForUser(old, copied, true, "new-trace", "aaaaa,ccccc"), map[string]string{
			"app": "web-2", "kausality.io/trace": "new-trace", "kausality.io/updaters": "aaaaa,ccccc", "kausality.io/controllers": "bbbbb",
			"kausality.io/phase": "initialized", "kausality.io/approvals": "[parent approvals]", "kausality.io/mode": "log", "kausal.io/allowances": "[stored allowances]"}},
		{"user, no desired change", ComputeAnnotationsForUser(old, copied, false, "", ""), map[string]string{
			"app": "web-2", "kausality.io/trace": "old-trace", "kausality.io/updaters": "aaaaa", "kausality.io/controllers": "bbbbb",
			"kausality.io/phase": "initialized", "kausality.io/approvals": "[parent approvals]", "kausality.io/mode": "log", "kausal.io/allowances": "[stored allowances]"}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s:\n got  %v\n want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestAnnotationChanges(t *testing.T) {
	c := diffAnnotations(map[string]string{"a": "1", "b": "2", "c": "3"}, map[string]string{"a": "1", "b": "x", "d": "4"})
	want := &AnnotationChanges{Set: map[string]string{"b": "x", "d": "4"}, Remove: []string{"c"}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("diff %+v", c)
	}
	if diffAnnotations(map[string]string{"a": "1"}, map[string]string{"a": "1"}) != nil {
		t.Error("no diff must be nil")
	}
	p := c.Pointers()
	if len(p) != 3 || *p["b"] != "x" || *p["d"] != "4" || p["c"] != nil {
		t.Errorf("pointers %v", p)
	}
	obj := &unstructured.Unstructured{Object: map[string]interface{}{"metadata": map[string]interface{}{"annotations": map[string]interface{}{"a": "1", "b": "2", "c": "3"}}}}
	c.Apply(obj)
	if got := obj.GetAnnotations(); !reflect.DeepEqual(got, map[string]string{"a": "1", "b": "x", "d": "4"}) {
		t.Errorf("applied %v", got)
	}
	all := &AnnotationChanges{Remove: []string{"a", "b", "d"}}
	all.Apply(obj)
	if _, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "metadata", "annotations"); found {
		t.Error("empty annotations must be removed")
	}
	var nilC *AnnotationChanges
	if !nilC.Empty() || nilC.Pointers() != nil {
		t.Error("nil changes")
	}
	nilC.Apply(obj)
}
