package patch

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func metadataView() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]interface{}{
			"name": "rs", "namespace": "ns", "resourceVersion": "7",
			"labels": map[string]interface{}{"app": "web"},
			"annotations": map[string]interface{}{
				"kausality.io/trace": "t", "kausal.io/allowances": "a", "kausality.io/approvals": "p", "note": "n",
			},
			"ownerReferences": []interface{}{map[string]interface{}{
				"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1", "controller": true,
			}},
		},
	}}
}

func TestApplyToMetadataJSONPatch(t *testing.T) {
	tests := []struct {
		name        string
		patch       string
		wantOK      bool
		wantChanges bool
		wantAnn     map[string]string
	}{
		{name: "content only", patch: `[{"op":"replace","path":"/spec/minReadySeconds","value":3}]`, wantOK: true, wantChanges: true},
		{name: "removal of content", patch: `[{"op":"remove","path":"/spec/template"}]`, wantOK: true, wantChanges: true},
		{name: "test of content changes nothing", patch: `[{"op":"test","path":"/spec/replicas","value":1}]`, wantOK: true},
		{name: "status only", patch: `[{"op":"replace","path":"/status/replicas","value":1}]`, wantOK: true},
		{name: "annotation added beside content", patch: `[{"op":"add","path":"/metadata/annotations/kausal.io~1allowances","value":"forged"},{"op":"replace","path":"/spec/replicas","value":2}]`,
			wantOK: true, wantChanges: true, wantAnn: map[string]string{"kausal.io/allowances": "forged"}},
		{name: "annotation removed", patch: `[{"op":"remove","path":"/metadata/annotations/kausality.io~1trace"}]`,
			wantOK: true, wantAnn: map[string]string{"kausality.io/trace": ""}},
		{name: "annotations replaced whole", patch: `[{"op":"replace","path":"/metadata/annotations","value":{}}]`,
			wantOK: true, wantAnn: map[string]string{"kausality.io/trace": "", "kausal.io/allowances": ""}},
		{name: "metadata test that holds", patch: `[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"replace","path":"/spec/replicas","value":2}]`, wantOK: true, wantChanges: true},
		{name: "metadata test that fails (the cache may be behind)", patch: `[{"op":"test","path":"/metadata/resourceVersion","value":"8"}]`},
		{name: "metadata path the view does not hold", patch: `[{"op":"remove","path":"/metadata/managedFields/0"}]`},
		{name: "content copied into an annotation", patch: `[{"op":"copy","from":"/spec/template","path":"/metadata/annotations/kausal.io~1allowances"}]`},
		{name: "annotation moved into content", patch: `[{"op":"move","from":"/metadata/annotations/note","path":"/spec/note"}]`},
		{name: "content moved within content", patch: `[{"op":"move","from":"/spec/a","path":"/spec/b"}]`, wantOK: true, wantChanges: true},
		{name: "content copied within content (copies can amplify)", patch: `[{"op":"copy","from":"/spec/a","path":"/spec/b"}]`},
		{name: "whole object replaced", patch: `[{"op":"replace","path":"","value":{}}]`},
		{name: "not a JSON patch", patch: `{"spec":{}}`},
		{name: "rename", patch: `[{"op":"replace","path":"/metadata/name","value":"other"}]`},
		// kube-apiserver reads members by their exact names: a decoy
		// member names no path.
		{name: "an annotation written under a decoy Path member", patch: `[{"op":"add","path":"/metadata/annotations/kausality.io~1mode","value":"log","Path":"/spec/replicas"}]`,
			wantOK: true, wantAnn: map[string]string{"kausality.io/mode": "log"}},
		{name: "content written under a decoy Path member", patch: `[{"op":"add","path":"/spec/replicas","value":7,"Path":"/metadata/labels/decoy"}]`,
			wantOK: true, wantChanges: true},
		// kube-apiserver's library drops whatever comes before a path's
		// first "/": these address /metadata, whatever they start with.
		{name: "an annotation added under a path without its leading slash", patch: `[{"op":"add","path":"spec/metadata/annotations/kausality.io~1controllers","value":"forged"}]`,
			wantOK: true, wantAnn: map[string]string{"kausality.io/controllers": "forged"}},
		{name: "an annotation removed under a path without its leading slash", patch: `[{"op":"remove","path":"spec/metadata/annotations/kausal.io~1allowances"}]`,
			wantOK: true, wantAnn: map[string]string{"kausal.io/allowances": ""}},
		{name: "annotations replaced whole under a path without its leading slash", patch: `[{"op":"replace","path":"x/metadata/annotations","value":{"kausality.io/mode":"log"}}]`,
			wantOK: true, wantAnn: map[string]string{"kausality.io/trace": "", "kausal.io/allowances": "", "kausality.io/mode": "log"}},
		{name: "content written under a path that starts with metadata", patch: `[{"op":"replace","path":"metadata/spec/replicas","value":2}]`,
			wantOK: true, wantChanges: true},
		{name: "an annotation moved into content from a path without its leading slash", patch: `[{"op":"move","from":"spec/metadata/annotations/note","path":"/spec/note"}]`},
		{name: "a path with no slash at all", patch: `[{"op":"add","path":"spec","value":{}}]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			view := metadataView()
			ns := "ns"
			got, ok := ApplyToMetadata(types.JSONPatchType, view, []byte(tc.patch), Options{Name: "rs", Namespace: &ns, SkipTypeCheck: true})
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if got.ChangesContent != tc.wantChanges {
				t.Errorf("ChangesContent = %v, want %v", got.ChangesContent, tc.wantChanges)
			}
			if _, has := got.Object.Object["spec"]; has {
				t.Errorf("content was made up on the metadata: %v", got.Object.Object["spec"])
			}
			ann := got.Object.GetAnnotations()
			for k, want := range tc.wantAnn {
				if v, has := ann[k]; v != want || has != (want != "") {
					t.Errorf("annotation %s = %q (present %v), want %q", k, v, has, want)
				}
			}
			if view.GetAnnotations()["kausal.io/allowances"] != "a" {
				t.Errorf("the view was changed: %v", view.GetAnnotations())
			}
		})
	}
}

func TestApplyToMetadataApply(t *testing.T) {
	const owner = `"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"u1","controller":true}]`
	tests := []struct {
		name    string
		config  string
		wantOK  bool
		wantAnn map[string]string
	}{
		{name: "same controller, Kausality annotations omitted: counted as removed, the others kept",
			config: `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"rs",` + owner + `},"spec":{"replicas":2}}`, wantOK: true,
			wantAnn: map[string]string{"kausality.io/trace": "", "kausal.io/allowances": "", "kausality.io/approvals": "", "note": "n"}},
		{name: "annotation named",
			config: `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"rs",` + owner + `,"annotations":{"kausal.io/allowances":"forged"}}}`, wantOK: true,
			wantAnn: map[string]string{"kausal.io/allowances": "forged"}},
		{name: "no owner reference: whether the stored one stays is the field ownership's",
			config: `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"rs"},"spec":{"replicas":2}}`},
		{name: "another controller",
			config: `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"rs","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"x","uid":"u2","controller":true}]}}`},
		{name: "another name",
			config: `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"other",` + owner + `}}`},
		{name: "not an object", config: `[]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ApplyToMetadata(types.ApplyYAMLPatchType, metadataView(), []byte(tc.config), Options{})
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if !got.ChangesContent {
				t.Errorf("an apply may remove what its manager owned: it counts as a change")
			}
			ann := got.Object.GetAnnotations()
			for k, want := range tc.wantAnn {
				if v, has := ann[k]; v != want || has != (want != "") {
					t.Errorf("annotation %s = %q (present %v), want %q", k, v, has, want)
				}
			}
		})
	}
}

func TestApplyToMetadataOtherPatchTypes(t *testing.T) {
	for _, pt := range []types.PatchType{types.MergePatchType, types.StrategicMergePatchType} {
		if _, ok := ApplyToMetadata(pt, metadataView(), []byte(`{}`), Options{}); ok {
			t.Errorf("%s: merge patches apply to the metadata as they are", pt)
		}
	}
}
