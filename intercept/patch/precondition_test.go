package patch

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func TestWithResourceVersion(t *testing.T) {
	tests := []struct {
		name   string
		pt     types.PatchType
		patch  string
		want   string
		wantOK bool
	}{
		{"merge patch", types.MergePatchType, `{"spec":{"replicas":3}}`, `{"metadata":{"resourceVersion":"42"},"spec":{"replicas":3}}`, true},
		{"merge patch with metadata", types.MergePatchType, `{"metadata":{"labels":{"a":"b"}}}`, `{"metadata":{"labels":{"a":"b"},"resourceVersion":"42"}}`, true},
		{"the client's own precondition wins", types.MergePatchType, `{"metadata":{"resourceVersion":"7"}}`, `{"metadata":{"resourceVersion":"7"}}`, false},
		{"metadata null cannot carry one", types.MergePatchType, `{"metadata":null}`, `{"metadata":null}`, false},
		{"a merge patch that clears the resourceVersion gets one", types.MergePatchType, `{"metadata":{"resourceVersion":null}}`, `{"metadata":{"resourceVersion":"42"}}`, true},
		{"a strategic merge patch with an empty resourceVersion gets one", types.StrategicMergePatchType, `{"metadata":{"resourceVersion":""}}`, `{"metadata":{"resourceVersion":"42"}}`, true},
		{"a JSON patch that removes the resourceVersion gets it back last", types.JSONPatchType, `[{"op":"remove","path":"/metadata/resourceVersion"}]`,
			`[{"op":"remove","path":"/metadata/resourceVersion"},{"op":"add","path":"/metadata/resourceVersion","value":"42"}]`, true},
		{"a JSON patch that tests it, then removes it", types.JSONPatchType, `[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"remove","path":"/metadata/resourceVersion"}]`,
			`[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"remove","path":"/metadata/resourceVersion"},{"op":"add","path":"/metadata/resourceVersion","value":"42"}]`, true},
		{"a JSON patch that replaces it with an empty one", types.JSONPatchType, `[{"op":"replace","path":"/metadata/resourceVersion","value":""}]`,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":""},{"op":"add","path":"/metadata/resourceVersion","value":"42"}]`, true},
		{"a JSON patch that replaces metadata with one naming a resourceVersion", types.JSONPatchType, `[{"op":"replace","path":"/metadata","value":{"name":"x","resourceVersion":"7"}}]`,
			`[{"op":"replace","path":"/metadata","value":{"name":"x","resourceVersion":"7"}}]`, false},
		{"a JSON patch that replaces metadata with one naming none", types.JSONPatchType, `[{"op":"replace","path":"/metadata","value":{"name":"x"}}]`,
			`[{"op":"replace","path":"/metadata","value":{"name":"x"}},{"op":"add","path":"/metadata/resourceVersion","value":"42"}]`, true},
		{"apply with an empty resourceVersion gets one", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  resourceVersion: \"\"\n",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","resourceVersion":"42"}}`, true},
		{"a merge patch naming version 0 is unconditional, and gets one", types.MergePatchType, `{"metadata":{"resourceVersion":"0"}}`, `{"metadata":{"resourceVersion":"42"}}`, true},
		{"a strategic merge patch naming version 00 gets one", types.StrategicMergePatchType, `{"metadata":{"resourceVersion":"00"}}`, `{"metadata":{"resourceVersion":"42"}}`, true},
		{"a JSON patch that replaces it with 0 gets one", types.JSONPatchType, `[{"op":"replace","path":"/metadata/resourceVersion","value":"0"}]`,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":"0"},{"op":"add","path":"/metadata/resourceVersion","value":"42"}]`, true},
		{"apply naming version 0 gets one", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  resourceVersion: \"0\"\n",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","resourceVersion":"42"}}`, true},
		{"strategic merge patch", types.StrategicMergePatchType, `{"spec":{"replicas":3}}`, `{"metadata":{"resourceVersion":"42"},"spec":{"replicas":3}}`, true},
		{"JSON patch", types.JSONPatchType, `[{"op":"replace","path":"/spec/replicas","value":3}]`,
			`[{"op":"replace","path":"/spec/replicas","value":3},{"op":"add","path":"/metadata/resourceVersion","value":"42"}]`, true},
		{"JSON patch naming the resourceVersion", types.JSONPatchType, `[{"op":"test","path":"/metadata/resourceVersion","value":"7"}]`,
			`[{"op":"test","path":"/metadata/resourceVersion","value":"7"}]`, false},
		{"apply", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n",
			`{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"name":"c","resourceVersion":"42"}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := WithResourceVersion(tt.pt, []byte(tt.patch), "42", nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want || ok != tt.wantOK {
				t.Errorf("got %s, %v; want %s, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
	if _, _, err := WithResourceVersion(types.MergePatchType, []byte(`[1]`), "42", nil); err == nil {
		t.Error("a merge patch that is not an object must be a 400")
	}
}

func TestNamesResourceVersion(t *testing.T) {
	// patchedWith is the stored object (at resourceVersion 7) with the
	// patch applied, as the proxy computes it.
	patchedWith := func(rv string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
		u.SetResourceVersion(rv)
		return u
	}
	for _, tc := range []struct {
		name      string
		patchType types.PatchType
		patch     string
		patched   *unstructured.Unstructured
		want      bool
	}{
		{"merge patch with a resourceVersion", types.MergePatchType, `{"metadata":{"resourceVersion":"7"},"status":{"a":1}}`, nil, true},
		{"strategic merge patch with a resourceVersion", types.StrategicMergePatchType, `{"metadata":{"resourceVersion":"7"}}`, nil, true},
		{"merge patch of status only", types.MergePatchType, `{"status":{"a":1}}`, nil, false},
		{"merge patch with an empty resourceVersion", types.MergePatchType, `{"metadata":{"resourceVersion":""}}`, nil, false},
		{"merge patch with a null metadata", types.MergePatchType, `{"metadata":null}`, nil, false},
		{"decoy member name is not the resourceVersion", types.MergePatchType, `{"metadata":{"ResourceVersion":"7"}}`, nil, false},
		{"decoy metadata name", types.MergePatchType, `{"Metadata":{"resourceVersion":"7"}}`, nil, false},
		{"not JSON", types.MergePatchType, `{`, nil, false},
		{"JSON patch testing the resourceVersion", types.JSONPatchType, `[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"replace","path":"/status/a","value":1}]`, patchedWith("7"), true},
		{"JSON patch replacing the resourceVersion", types.JSONPatchType, `[{"op":"replace","path":"/metadata/resourceVersion","value":"7"}]`, patchedWith("7"), true},
		{"JSON patch adding metadata with a resourceVersion", types.JSONPatchType, `[{"op":"add","path":"/metadata","value":{"name":"x","resourceVersion":"7"}}]`, patchedWith("7"), true},
		{"JSON patch of status only", types.JSONPatchType, `[{"op":"replace","path":"/status/a","value":1}]`, patchedWith("7"), false},
		{"JSON patch removing the resourceVersion", types.JSONPatchType, `[{"op":"remove","path":"/metadata/resourceVersion"}]`, patchedWith(""), false},
		{"JSON patch replacing it, then removing it", types.JSONPatchType, `[{"op":"replace","path":"/metadata/resourceVersion","value":"7"},{"op":"remove","path":"/metadata/resourceVersion"}]`, patchedWith(""), false},
		{"JSON patch replacing it with an empty string", types.JSONPatchType, `[{"op":"replace","path":"/metadata/resourceVersion","value":""}]`, patchedWith(""), false},
		{"JSON patch adding it as null", types.JSONPatchType, `[{"op":"add","path":"/metadata/resourceVersion","value":null}]`, patchedWith(""), false},
		{"JSON patch whose result is unknown", types.JSONPatchType, `[{"op":"test","path":"/metadata/resourceVersion","value":"7"}]`, nil, false},
		{"JSON patch with a decoy path member", types.JSONPatchType, `[{"op":"replace","path":"/status/a","Path":"/metadata/resourceVersion","value":"7"}]`, patchedWith("7"), false},
		{"apply configuration with a resourceVersion", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  resourceVersion: \"7\"\n", nil, true},
		{"merge patch naming version 0", types.MergePatchType, `{"metadata":{"resourceVersion":"0"},"status":{"a":1}}`, nil, false},
		{"JSON patch replacing it with 0", types.JSONPatchType, `[{"op":"replace","path":"/metadata/resourceVersion","value":"0"}]`, patchedWith("0"), false},
		{"apply configuration naming version 0", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  resourceVersion: \"0\"\n", nil, false},
		{"apply configuration without one", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var patched metav1.Object
			if tc.patched != nil {
				patched = tc.patched
			}
			if got := NamesResourceVersion(tc.patchType, []byte(tc.patch), patched); got != tc.want {
				t.Errorf("NamesResourceVersion(%s) = %v, want %v", tc.patch, got, tc.want)
			}
		})
	}
}
