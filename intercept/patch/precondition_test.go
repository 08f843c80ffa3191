package patch

import (
	"testing"

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
			got, ok, err := WithResourceVersion(tt.pt, []byte(tt.patch), "42")
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want || ok != tt.wantOK {
				t.Errorf("got %s, %v; want %s, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
	if _, _, err := WithResourceVersion(types.MergePatchType, []byte(`[1]`), "42"); err == nil {
		t.Error("a merge patch that is not an object must be a 400")
	}
}

func TestNamesResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		name      string
		patchType types.PatchType
		patch     string
		want      bool
	}{
		{"merge patch with a resourceVersion", types.MergePatchType, `{"metadata":{"resourceVersion":"7"},"status":{"a":1}}`, true},
		{"strategic merge patch with a resourceVersion", types.StrategicMergePatchType, `{"metadata":{"resourceVersion":"7"}}`, true},
		{"merge patch of status only", types.MergePatchType, `{"status":{"a":1}}`, false},
		{"merge patch with an empty resourceVersion", types.MergePatchType, `{"metadata":{"resourceVersion":""}}`, false},
		{"merge patch with a null metadata", types.MergePatchType, `{"metadata":null}`, false},
		{"decoy member name is not the resourceVersion", types.MergePatchType, `{"metadata":{"ResourceVersion":"7"}}`, false},
		{"decoy metadata name", types.MergePatchType, `{"Metadata":{"resourceVersion":"7"}}`, false},
		{"not JSON", types.MergePatchType, `{`, false},
		{"JSON patch testing the resourceVersion", types.JSONPatchType, `[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"replace","path":"/status/a","value":1}]`, true},
		{"JSON patch replacing the resourceVersion", types.JSONPatchType, `[{"op":"replace","path":"/metadata/resourceVersion","value":"7"}]`, true},
		{"JSON patch adding metadata with a resourceVersion", types.JSONPatchType, `[{"op":"add","path":"/metadata","value":{"name":"x","resourceVersion":"7"}}]`, true},
		{"JSON patch of status only", types.JSONPatchType, `[{"op":"replace","path":"/status/a","value":1}]`, false},
		{"JSON patch removing the resourceVersion", types.JSONPatchType, `[{"op":"remove","path":"/metadata/resourceVersion"}]`, false},
		{"JSON patch with a decoy path member", types.JSONPatchType, `[{"op":"replace","path":"/status/a","Path":"/metadata/resourceVersion","value":"7"}]`, false},
		{"apply configuration with a resourceVersion", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  resourceVersion: \"7\"\n", true},
		{"apply configuration without one", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NamesResourceVersion(tc.patchType, []byte(tc.patch)); got != tc.want {
				t.Errorf("NamesResourceVersion(%s) = %v, want %v", tc.patch, got, tc.want)
			}
		})
	}
}
