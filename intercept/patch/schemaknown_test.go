package patch

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestSchemaKnown(t *testing.T) {
	for _, tc := range []struct {
		gvk  schema.GroupVersionKind
		want bool
	}{
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, true},
		{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, true},
		{schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}, false},
		// A built-in group's kind at a version the proxy's types lack.
		{schema.GroupVersionKind{Group: "apps", Version: "v9", Kind: "ReplicaSet"}, false},
	} {
		if got := SchemaKnown(tc.gvk); got != tc.want {
			t.Errorf("SchemaKnown(%s) = %v, want %v", tc.gvk, got, tc.want)
		}
	}
}
