package notify

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// A report holds its objects as objects in process and as JSON once it
// has been stored or sent; both read alike, integers as unstructured
// reads them.
func TestObjectOf(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}
	tests := []struct {
		name      string
		e         runtime.RawExtension
		wantKind  string
		wantSpecN any
	}{
		{"an object in process", runtime.RawExtension{Object: u}, "ConfigMap", nil},
		{"JSON", runtime.RawExtension{Raw: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replicas":3}}`)}, "Deployment", int64(3)},
		{"a typed object", runtime.RawExtension{Object: &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}}}, "Secret", nil},
		{"none", runtime.RawExtension{}, "", nil},
		{"not an object", runtime.RawExtension{Raw: []byte(`[1]`)}, "", nil},
		{"null", runtime.RawExtension{Raw: []byte(`null`)}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ObjectOf(tt.e)
			if tt.wantKind == "" {
				if got != nil {
					t.Fatalf("got %v, want nil", got.Object)
				}
				return
			}
			if got == nil || got.GetKind() != tt.wantKind {
				t.Fatalf("got %v, want a %s", got, tt.wantKind)
			}
			if n, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "replicas"); n != tt.wantSpecN {
				t.Fatalf("spec.replicas is %#v, want %#v", n, tt.wantSpecN)
			}
		})
	}
}
