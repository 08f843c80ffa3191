package subresources

import "testing"

func TestCRDHasStatus(t *testing.T) {
	crd := map[string]any{"spec": map[string]any{"versions": []any{
		map[string]any{"name": "v1", "subresources": map[string]any{"status": map[string]any{}}},
		map[string]any{"name": "v2", "subresources": map[string]any{"scale": map[string]any{"specReplicasPath": ".spec.replicas"}}},
		map[string]any{"name": "v3"},
	}}}
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"v1", true},
		{"v2", false},
		{"v3", false},
		// A version the CRD does not list writes nothing.
		{"v4", true},
	} {
		if got := crdHasStatus(crd, tc.version); got != tc.want {
			t.Errorf("crdHasStatus(%s) = %v, want %v", tc.version, got, tc.want)
		}
	}
}
