package patch

import (
	"fmt"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// A remembered configuration is the one decoding gives, and each caller
// gets a copy of its own: one that changes it changes no other's.
func TestARememberedConfigurationIsACopyOfTheDecodedOne(t *testing.T) {
	patch := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {a: b}\ndata:\n  k: v\n")
	want, err := decodeApplyConfigurationOnce(types.ApplyYAMLPatchType, patch)
	if err != nil {
		t.Fatal(err)
	}
	first, err := decodeApplyConfiguration(types.ApplyYAMLPatchType, patch)
	if err != nil {
		t.Fatal(err)
	}
	first.SetResourceVersion("42")
	first.SetLabels(map[string]string{"x": "y"})
	second, err := decodeApplyConfiguration(types.ApplyYAMLPatchType, patch)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(second.Object, want.Object) {
		t.Errorf("remembered %v, want %v as decoded", second.Object, want.Object)
	}
	// The same bytes changed in place are another patch.
	changed := append([]byte(nil), patch...)
	copy(changed[len(changed)-2:], "w\n")
	third, err := decodeApplyConfiguration(types.ApplyYAMLPatchType, changed)
	if err != nil {
		t.Fatal(err)
	}
	if v := third.Object["data"].(map[string]any)["k"]; v != "w" {
		t.Errorf("a changed patch decoded as %v, want its own value w", v)
	}
}

// The memo holds at most its size of configurations, each of at most its
// bound of bytes, the oldest forgotten first.
func TestTheConfigurationMemoIsBounded(t *testing.T) {
	m := newConfigurationMemo(2, 64)
	decode := func(name string) []byte {
		return []byte(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n", name))
	}
	for _, name := range []string{"a", "b", "c"} {
		cfg, err := decodeApplyConfigurationOnce(types.ApplyYAMLPatchType, decode(name))
		if err != nil {
			t.Fatal(err)
		}
		m.put(types.ApplyYAMLPatchType, decode(name), cfg)
	}
	if len(m.entries) != 2 {
		t.Errorf("%d configurations remembered, want 2", len(m.entries))
	}
	if _, ok := m.get(types.ApplyYAMLPatchType, decode("a")); ok {
		t.Error("the oldest configuration is still remembered")
	}
	if _, ok := m.get(types.ApplyYAMLPatchType, decode("c")); !ok {
		t.Error("the newest configuration is forgotten")
	}
	large := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a-name-longer-than-the-bound-of-this-memo\n")
	cfg, err := decodeApplyConfigurationOnce(types.ApplyYAMLPatchType, large)
	if err != nil {
		t.Fatal(err)
	}
	m.put(types.ApplyYAMLPatchType, large, cfg)
	if _, ok := m.get(types.ApplyYAMLPatchType, large); ok {
		t.Error("a configuration above the bound of bytes is remembered")
	}
}
