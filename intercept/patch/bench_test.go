package patch

import (
	"encoding/json"
	"testing"

	"github.com/kausality-io/kausality-proxy/internal/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// deploymentApplyConfig is testDeployment as a full apply configuration with
// the given image for the first container.
func deploymentApplyConfig(b testing.TB, image string) map[string]interface{} {
	d := testDeployment()
	d.Spec.Template.Spec.Containers[0].Image = image
	u := testutil.ToUnstructured(b, d)
	unstructured.RemoveNestedField(u.Object, "status")
	return u.Object
}

func BenchmarkApply(b *testing.B) {
	current := currentDeployment(b)
	cfg1, err := yaml.Marshal(deploymentApplyConfig(b, "nginx:1.25"))
	if err != nil {
		b.Fatal(err)
	}
	cfg2, _ := yaml.Marshal(deploymentApplyConfig(b, "nginx:1.26"))
	cfg2CBOR, _ := cbor.Marshal(deploymentApplyConfig(b, "nginx:1.26"))
	applied := func(opts Options) *unstructured.Unstructured {
		u, err := Apply(types.ApplyYAMLPatchType, nil, cfg1, opts)
		if err != nil {
			b.Fatal(err)
		}
		u.SetUID("uid")
		return u
	}
	deduced := Options{FieldManager: "kubectl"}
	builtin := Options{FieldManager: "kubectl", TypeConverter: builtinConverter}
	appliedDeduced, appliedBuiltin := applied(deduced), applied(builtin)

	cases := []struct {
		name      string
		patchType types.PatchType
		current   *unstructured.Unstructured
		patch     []byte
		opts      Options
	}{
		{"JSONPatch", types.JSONPatchType, current, []byte(`[{"op":"test","path":"/spec/replicas","value":3},{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"nginx:1.26"}]`), Options{}},
		{"MergePatch", types.MergePatchType, current, []byte(`{"spec":{"replicas":5,"template":{"metadata":{"annotations":{"restartedAt":"2026-01-01T00:00:00Z"}}}}}`), Options{}},
		// As the proxy applies it: kube-apiserver checks the result's types.
		{"MergePatchSkipTypeCheck", types.MergePatchType, current, []byte(`{"spec":{"replicas":5,"template":{"metadata":{"annotations":{"restartedAt":"2026-01-01T00:00:00Z"}}}}}`), Options{SkipTypeCheck: true}},
		{"StrategicMergePatch", types.StrategicMergePatchType, current, []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:1.26"}]}}}}`), Options{}},
		{"ApplyDeduced", types.ApplyYAMLPatchType, appliedDeduced, cfg2, deduced},
		{"ApplyBuiltinSchema", types.ApplyYAMLPatchType, appliedBuiltin, cfg2, builtin},
		{"ApplyCBORBuiltinSchema", types.ApplyCBORPatchType, appliedBuiltin, cfg2CBOR, builtin},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Apply(c.patchType, c.current, c.patch, c.opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAddAnnotations(b *testing.B) {
	current := currentDeployment(b)
	trace := `[{"apiVersion":"example.com/v1","kind":"App","name":"web","generation":4,"user":"system:serviceaccount:apps:app-controller","timestamp":"2026-01-01T00:00:00Z"}]`
	ann := map[string]*string{"kausality.io/trace": &trace, "kausality.io/updaters": nil}
	cfg, _ := yaml.Marshal(deploymentApplyConfig(b, "nginx:1.26"))
	cases := []struct {
		name      string
		patchType types.PatchType
		patch     []byte
	}{
		{"JSONPatch", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"nginx:1.26"}]`)},
		{"MergePatch", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`)},
		{"StrategicMergePatch", types.StrategicMergePatchType, []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:1.26"}]}}}}`)},
		{"ApplyYAML", types.ApplyYAMLPatchType, cfg},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AddAnnotations(c.patchType, c.patch, ann, current); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOnlyMetadata(b *testing.B) {
	for _, c := range []struct {
		name      string
		patchType types.PatchType
		patch     []byte
	}{
		{"MergePatchOfTheSpec", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`)},
		{"MergePatchOfLabels", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"web","tier":"frontend"},"annotations":{"example.com/note":"a longer value that a person wrote"}}}`)},
		{"StrategicMergePatchOfAContainer", types.StrategicMergePatchType, []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:1.26"}]}}}}`)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				OnlyMetadata(c.patchType, c.patch)
			}
		})
	}
}

// BenchmarkAnnotateObject is the proxy's annotations written into a
// controller's update of a Deployment, against decoding the object,
// writing them and encoding it again.
func BenchmarkAnnotateObject(b *testing.B) {
	current := currentDeployment(b)
	data, err := current.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	trace := `[{"apiVersion":"example.com/v1","kind":"App","name":"web","generation":4,"user":"system:serviceaccount:apps:app-controller","timestamp":"2026-01-01T00:00:00Z"}]`
	meta := ObjectMetadata{Annotations: map[string]*string{"kausality.io/trace": &trace, "kausality.io/updaters": nil}, ResourceVersion: "42", Namespace: "default"}
	b.Run("Spliced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := AnnotateObject(data, meta); !ok {
				b.Fatal("not spliced")
			}
		}
	})
	b.Run("Encoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obj := current.DeepCopy()
			ann := obj.GetAnnotations()
			ann["kausality.io/trace"] = trace
			delete(ann, "kausality.io/updaters")
			obj.SetAnnotations(ann)
			if _, err := json.Marshal(obj.Object); err != nil {
				b.Fatal(err)
			}
		}
	})
}
