package patch

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestOnlyMetadata(t *testing.T) {
	tests := []struct {
		name  string
		pt    types.PatchType
		patch string
		want  bool
	}{
		{"merge patch of labels", types.MergePatchType, `{"metadata":{"labels":{"a":"b"}}}`, true},
		{"merge patch of annotations and status", types.MergePatchType, `{"metadata":{"annotations":{"a":"b"}},"status":{"x":1}}`, true},
		{"merge patch of the spec", types.MergePatchType, `{"metadata":{"labels":{"a":"b"}},"spec":{"replicas":3}}`, false},
		{"merge patch naming the type", types.MergePatchType, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"a":"b"}}}`, true},
		{"merge patch of a ConfigMap's data", types.MergePatchType, `{"data":{"k":"v"}}`, false},
		{"strategic merge patch of labels", types.StrategicMergePatchType, `{"metadata":{"labels":{"a":"b"}}}`, true},
		{"strategic merge patch replacing the object", types.StrategicMergePatchType, `{"$patch":"replace","metadata":{}}`, false},
		{"JSON patch of an annotation", types.JSONPatchType, `[{"op":"add","path":"/metadata/annotations/a","value":"b"}]`, true},
		{"JSON patch testing the spec, changing metadata", types.JSONPatchType, `[{"op":"test","path":"/metadata/name","value":"x"},{"op":"remove","path":"/metadata/labels/a"}]`, true},
		{"JSON patch of the spec", types.JSONPatchType, `[{"op":"replace","path":"/spec/replicas","value":3}]`, false},
		{"JSON patch moving the spec into metadata", types.JSONPatchType, `[{"op":"move","from":"/spec/replicas","path":"/metadata/labels/r"}]`, false},
		{"JSON patch copying the spec into metadata", types.JSONPatchType, `[{"op":"copy","from":"/spec/replicas","path":"/metadata/labels/r"}]`, true},
		{"a path that only starts like metadata", types.JSONPatchType, `[{"op":"add","path":"/metadataX","value":1}]`, false},
		// Members are read by their exact names, the last of duplicates
		// winning, as kube-apiserver reads them.
		{"JSON patch of the spec with a decoy Path member", types.JSONPatchType, `[{"op":"add","path":"/spec","value":{},"Path":"/metadata/labels/a"}]`, false},
		{"JSON patch of the spec with a decoy PATH member first", types.JSONPatchType, `[{"PATH":"/metadata/labels/a","op":"add","path":"/spec","value":{}}]`, false},
		{"JSON patch whose last path member is the spec", types.JSONPatchType, `[{"op":"add","path":"/metadata/labels/a","path":"/spec/replicas","value":3}]`, false},
		{"JSON patch whose last path member is metadata", types.JSONPatchType, `[{"op":"add","path":"/spec/replicas","path":"/metadata/labels/a","value":"3"}]`, true},
		{"JSON patch moving the spec, with a decoy From member", types.JSONPatchType, `[{"op":"move","from":"/spec/replicas","From":"/metadata/labels/b","path":"/metadata/labels/r"}]`, false},
		{"JSON patch with an escaped path member", types.JSONPatchType, `[{"op":"add","p\u0061th":"/spec/replicas","value":3}]`, false},
		{"JSON patch without a path", types.JSONPatchType, `[{"op":"add","Path":"/metadata/labels/a","value":"b"}]`, false},
		{"apply never", types.ApplyYAMLPatchType, `{"metadata":{"labels":{"a":"b"}}}`, false},
		{"not JSON", types.MergePatchType, `nope`, false},
	}
	for _, tt := range tests {
		if got := OnlyMetadata(tt.pt, []byte(tt.patch)); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
