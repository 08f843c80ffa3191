package patch

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestNamesAnnotation(t *testing.T) {
	keys := []string{"kausality.io/freeze", "kausality.io/approvals"}
	deployment := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	for _, tc := range []struct {
		name      string
		patchType types.PatchType
		patch     string
		want      bool
	}{
		{"merge: spec only", types.MergePatchType, `{"spec":{"replicas":3}}`, false},
		{"merge: status only", types.MergePatchType, `{"status":{"replicas":3}}`, false},
		{"merge: another annotation", types.MergePatchType, `{"metadata":{"annotations":{"example.com/x":"1"}}}`, false},
		{"merge: labels", types.MergePatchType, `{"metadata":{"labels":{"a":"b"}}}`, false},
		{"merge: removes a key", types.MergePatchType, `{"metadata":{"annotations":{"kausality.io/freeze":null}}}`, true},
		{"merge: sets a key", types.MergePatchType, `{"metadata":{"annotations":{"kausality.io/approvals":"[]"}}}`, true},
		{"merge: a key with an escaped slash", types.MergePatchType, `{"metadata":{"annotations":{"kausality.io\/freeze":null}}}`, true},
		{"merge: a key in unicode escapes", types.MergePatchType, `{"\u006detadata":{"annotations":{"kausality.io/\u0066reeze":null}}}`, true},
		{"merge: annotations removed whole", types.MergePatchType, `{"metadata":{"annotations":null}}`, true},
		{"merge: metadata removed whole", types.MergePatchType, `{"metadata":null}`, true},
		{"strategic: replaces the annotations", types.StrategicMergePatchType, `{"metadata":{"annotations":{"$patch":"replace","a":"b"}}}`, true},
		{"strategic: removes a key", types.StrategicMergePatchType, `{"metadata":{"annotations":{"kausality.io/freeze":null}}}`, true},
		{"strategic: spec only", types.StrategicMergePatchType, `{"spec":{"paused":true}}`, false},
		{"json: spec only, which the probe lacks", types.JSONPatchType, `[{"op":"replace","path":"/spec/replicas","value":3}]`, false},
		{"json: spec, then the whole object", types.JSONPatchType, `[{"op":"replace","path":"/spec/replicas","value":3},{"op":"replace","path":"","value":{}}]`, true},
		{"json: a path without a slash is the whole object", types.JSONPatchType, `[{"op":"replace","path":"spec","value":{}}]`, true},
		{"json: moved from the whole object", types.JSONPatchType, `[{"op":"move","from":"","path":"/spec"}]`, true},
		{"json: metadata in an escaped spelling", types.JSONPatchType, `[{"op":"remove","path":"/\u006detadata/annotations"}]`, true},
		{"json: a decoy path member", types.JSONPatchType, `[{"op":"replace","path":"/spec/replicas","Path":"","value":3}]`, false},
		{"json: not a JSON patch", types.JSONPatchType, `{"op":"remove"}`, true},
		{"json: another annotation", types.JSONPatchType, `[{"op":"add","path":"/metadata/annotations/example.com~1x","value":"1"}]`, false},
		{"json: removes a key", types.JSONPatchType, `[{"op":"remove","path":"/metadata/annotations/kausality.io~1freeze"}]`, true},
		{"json: replaces the annotations", types.JSONPatchType, `[{"op":"replace","path":"/metadata/annotations","value":{}}]`, true},
		{"json: moves a key away", types.JSONPatchType, `[{"op":"move","from":"/metadata/annotations/kausality.io~1approvals","path":"/metadata/annotations/x"}]`, true},
		{"apply: another annotation", types.ApplyYAMLPatchType, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  annotations:\n    example.com/x: \"1\"\n", false},
		{"apply: a key", types.ApplyYAMLPatchType, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  annotations:\n    kausality.io/freeze: \"\"\n", true},
		{"apply: not an object", types.ApplyYAMLPatchType, "- a\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NamesAnnotation(tc.patchType, []byte(tc.patch), keys, deployment); got != tc.want {
				t.Errorf("NamesAnnotation(%s) = %v, want %v", tc.patch, got, tc.want)
			}
		})
	}
}
