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
