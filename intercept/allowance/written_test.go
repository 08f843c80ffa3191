package allowance

import (
	"slices"
	"testing"
)

func TestWrittenPaths(t *testing.T) {
	tests := []struct {
		name       string
		patch      string
		strategic  bool
		want       []string
		wantCoarse bool
		wantOK     bool
	}{
		{name: "a scalar", patch: `{"spec":{"replicas":3}}`, want: []string{"spec.replicas"}, wantOK: true},
		{name: "metadata and status are no desired state",
			patch: `{"metadata":{"labels":{"a":"b"}},"status":{"replicas":1},"spec":{"minReadySeconds":5}}`,
			want:  []string{"spec.minReadySeconds"}, wantOK: true},
		{name: "only metadata", patch: `{"metadata":{"annotations":{"a":"b"}}}`, wantOK: true},
		{name: "a null removes the field and everything below it",
			patch: `{"spec":{"template":{"spec":{"nodeSelector":null}}}}`,
			want:  []string{"spec.template.spec.nodeSelector"}, wantCoarse: true, wantOK: true},
		{name: "a merge patch replaces a list whole",
			patch: `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"x"}]}}}}`,
			want:  []string{"spec.template.spec.containers"}, wantCoarse: true, wantOK: true},
		{name: "a strategic merge patch merges a list by key: the list changes",
			patch: `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"x"}]}}}}`, strategic: true,
			want: []string{"spec.template.spec.containers"}, wantCoarse: true, wantOK: true},
		{name: "a strategic directive makes its map change",
			patch: `{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"app"}],"containers":[{"name":"app","image":"x"}]}}}}`, strategic: true,
			want: []string{"spec.template.spec"}, wantCoarse: true, wantOK: true},
		{name: "a $ key is a field in a merge patch",
			patch: `{"spec":{"$weird":1}}`, want: []string{"spec[$weird]"}, wantOK: true},
		{name: "a directive on the whole object", patch: `{"$patch":"replace","spec":{"replicas":1}}`, strategic: true},
		{name: "keys that are not plain names",
			patch: `{"data":{"config.yaml":"a: b"}}`, want: []string{"data[config.yaml]"}, wantOK: true},
		{name: "not an object", patch: `[{"op":"add"}]`},
		{name: "null", patch: `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, coarse, ok := WrittenPaths([]byte(tt.patch), tt.strategic)
			if ok != tt.wantOK || coarse != tt.wantCoarse || !slices.Equal(got, tt.want) {
				t.Errorf("WrittenPaths = %q coarse=%v ok=%v, want %q coarse=%v ok=%v", got, coarse, ok, tt.want, tt.wantCoarse, tt.wantOK)
			}
		})
	}
}

// TestWrittenPathsCoverTheChange: every path the patch changes, as the
// stored and the patched object tell, is at or below a written path, so
// an allowance that covers the written paths covers the change.
func TestWrittenPathsCoverTheChange(t *testing.T) {
	stored := map[string]any{"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
		"nodeSelector": map[string]any{"disk": "ssd"},
		"containers":   []any{map[string]any{"name": "app", "image": "a", "ports": []any{int64(80)}}, map[string]any{"name": "side", "image": "s"}}}}}}
	patched := map[string]any{"spec": map[string]any{"replicas": int64(3), "template": map[string]any{"spec": map[string]any{
		"containers": []any{map[string]any{"name": "app", "image": "b"}}}}}}
	written, _, ok := WrittenPaths([]byte(`{"spec":{"replicas":3,"template":{"spec":{"nodeSelector":null,"containers":[{"name":"app","image":"b"}]}}}}`), false)
	if !ok {
		t.Fatal("not read")
	}
	for _, changed := range ChangedPaths(stored, patched) {
		covered := false
		for _, w := range written {
			covered = covered || Covers(w, changed)
		}
		if !covered {
			t.Errorf("%s changes, and no written path %q covers it", changed, written)
		}
	}
}
