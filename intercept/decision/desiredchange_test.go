package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestDesiredChange(t *testing.T) {
	withReplicas := func(n int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet"}}
		_ = unstructured.SetNestedField(u.Object, n, "spec", "replicas")
		return u
	}
	tests := []struct {
		name        string
		op          Operation
		old, new    *unstructured.Unstructured
		wantChanged bool
		wantPaths   []string
	}{
		{name: "a delete changes the desired state and lists no field", op: Delete, old: withReplicas(2), wantChanged: true},
		{name: "a delete of what the proxy has not read still changes it", op: Delete, wantChanged: true},
		{name: "an update of spec lists the field", op: Update, old: withReplicas(2), new: withReplicas(3), wantChanged: true, wantPaths: []string{"spec.replicas"}},
		{name: "an update of nothing desired changes nothing", op: Update, old: withReplicas(2), new: withReplicas(2)},
		{name: "a create with a spec changes it", op: Create, new: withReplicas(1), wantChanged: true, wantPaths: []string{"spec.replicas"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed, changes := DesiredChange(tt.op, tt.old, tt.new)
			if changed != tt.wantChanged {
				t.Errorf("changed %v, want %v", changed, tt.wantChanged)
			}
			var paths []string
			for _, c := range changes {
				paths = append(paths, c.Path)
			}
			if len(paths) != len(tt.wantPaths) || len(paths) > 0 && paths[0] != tt.wantPaths[0] {
				t.Errorf("changed fields %q, want %q", paths, tt.wantPaths)
			}
		})
	}
}
