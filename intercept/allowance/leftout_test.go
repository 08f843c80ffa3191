package allowance

import "testing"

func TestLeftOut(t *testing.T) {
	old := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
		"name": "app", "image": "app:1", "ports": []any{map[string]any{"containerPort": int64(80), "protocol": "TCP"}}}}}}
	new := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
		"name": "app", "image": "evil:1", "ports": []any{map[string]any{"containerPort": int64(80)}}}}}}
	for path, want := range map[string]bool{
		"spec.containers[0].ports[0].protocol": true,  // left out: kube-apiserver may default it back
		"spec.containers[0].image":             false, // changed, not left out
		"spec.containers[0].resources":         false, // in neither
		"create":                               false, // no path
		"spec.containers[*].image":             false, // a pattern names no field
	} {
		if got := LeftOut(old, new, path); got != want {
			t.Errorf("LeftOut(%s) = %v, want %v", path, got, want)
		}
	}
}
