package patch

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var fuzzPatchTypes = []types.PatchType{types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType}

// Whatever patch a caller sends, applying it to a stored Deployment either
// yields an object or a Status error (4xx, or 500 that names the cause),
// never a panic; and the precondition and metadata-only helpers never
// panic on it either.
func FuzzApply(f *testing.F) {
	for _, seed := range []struct {
		pt    uint8
		patch string
	}{
		{0, `[{"op":"replace","path":"/spec/replicas","value":3}]`},
		{0, `[{"op":"copy","from":"/spec","path":"/spec/template/x"},{"op":"copy","from":"/spec","path":"/metadata/labels/y"}]`},
		{0, `[{"op":"move","from":"/metadata/name","path":"/kind"}]`},
		{1, `{"spec":{"replicas":3},"metadata":{"annotations":null}}`},
		{1, `{"metadata":null}`},
		{2, `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"x"}]}}}}`},
		{2, `{"$patch":"replace"}`},
		{3, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n"},
	} {
		f.Add(seed.pt, []byte(seed.patch))
	}
	current := currentDeployment(f)
	kind := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		pt := fuzzPatchTypes[int(which)%len(fuzzPatchTypes)]
		ns := current.GetNamespace()
		opts := Options{FieldManager: "fuzz", Kind: kind, Name: current.GetName(), Namespace: &ns}
		out, err := Apply(pt, current.DeepCopy(), data, opts)
		if err != nil {
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("%s: the error is not a Status: %v", pt, err)
			}
			if status.Status().Code < 400 {
				t.Fatalf("%s: error with code %d: %v", pt, status.Status().Code, err)
			}
			return
		}
		if out == nil {
			t.Fatalf("%s: no error and no object", pt)
		}
		_, _, _ = WithResourceVersion(pt, data, "42", nil)
		_ = OnlyMetadata(pt, data)
	})
}
