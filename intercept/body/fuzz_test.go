package body

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Whatever a caller sends, decoding either yields an object that encodes
// again in the same format, or a Status error a person can act on (400,
// 413 or 415), never a panic.
func FuzzDecode(f *testing.F) {
	for _, seed := range []struct{ ct, body string }{
		{"application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"v"}}`},
		{"application/json; charset=utf-8", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":3}}`},
		{"application/yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n"},
		{"application/yaml", "a: &a [*a, *a]\n"},
		{"application/json", "\ufeff{}"},
		{"application/json", `{"a":1,"a":2}`},
		{"application/vnd.kubernetes.protobuf", "k8s\x00\n\x0c\n\x02v1\x12\x06Secret"},
		{"application/cbor", "\xd9\xd9\xf7\xa1\x64kind\x63Pod"},
		{"text/plain", "hello"},
	} {
		f.Add(seed.ct, []byte(seed.body))
	}
	hint := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	f.Fuzz(func(t *testing.T, contentType string, data []byte) {
		obj, format, err := Decode(contentType, data, &hint)
		if err != nil {
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("decoding error is not a Status: %v", err)
			}
			if code := status.Status().Code; code != 400 && code != 413 && code != 415 && code != 422 {
				t.Fatalf("decoding error has code %d: %v", code, err)
			}
			return
		}
		if obj == nil {
			t.Fatal("no error and no object")
		}
		if _, _, err := Encode(obj, format); err != nil {
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("re-encoding a decoded object failed without a Status: %v", err)
			}
		}
	})
}
