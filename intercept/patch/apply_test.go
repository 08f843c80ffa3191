package patch

import (
	"sort"
	"strings"
	"testing"

	"github.com/kausality-io/kausality-proxy/internal/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

var builtinConverter = NewBuiltinTypeConverter(nil)

// webConfig is what `kubectl apply --server-side` would send for a
// Deployment "web" with the given replicas and containers ("name=image").
func webConfig(replicas string, containers ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\nspec:\n")
	if replicas != "" {
		b.WriteString("  replicas: " + replicas + "\n")
	}
	b.WriteString("  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n")
	for _, c := range containers {
		name, image, _ := strings.Cut(c, "=")
		b.WriteString("      - name: " + name + "\n        image: " + image + "\n")
	}
	return b.String()
}

func mustApply(t testing.TB, current *unstructured.Unstructured, cfg string, opts Options) *unstructured.Unstructured {
	t.Helper()
	out, err := Apply(types.ApplyYAMLPatchType, current, []byte(cfg), opts)
	if err != nil {
		t.Fatalf("apply by %s: %v", opts.FieldManager, err)
	}
	if current == nil {
		out.SetUID("uid-1") // it is stored now
	}
	return out
}

// update records a non-apply write by manager in managedFields, like the
// apiserver does for an update (e.g. a controller's PUT).
func update(t testing.TB, live *unstructured.Unstructured, mutate func(u *unstructured.Unstructured), manager string, tc managedfields.TypeConverter) *unstructured.Unstructured {
	t.Helper()
	gvk := live.GroupVersionKind()
	fm, err := managedfields.NewDefaultCRDFieldManager(tc, unstructuredConvertor{}, noopDefaulter{}, unstructuredCreater{}, gvk, gvk.GroupVersion(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	newObj := live.DeepCopy()
	mutate(newObj)
	out, err := fm.Update(live, newObj, manager)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*unstructured.Unstructured)
}

func containerImages(t testing.TB, u *unstructured.Unstructured) string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	var out []string
	for _, c := range cs {
		m := c.(map[string]interface{})
		out = append(out, m["name"].(string)+"="+m["image"].(string))
	}
	return strings.Join(out, ",")
}

func managerNames(u *unstructured.Unstructured) string {
	var out []string
	for _, e := range u.GetManagedFields() {
		out = append(out, e.Manager+"/"+string(e.Operation))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func TestServerSideApply(t *testing.T) {
	kubectl := Options{FieldManager: "kubectl", TypeConverter: builtinConverter}
	deducedKubectl := Options{FieldManager: "kubectl"}

	t.Run("create returns the applied object", func(t *testing.T) {
		got := mustApply(t, nil, webConfig("2", "app=nginx:1"), kubectl)
		wantValue(t, got, int64(2), "spec", "replicas")
		if containerImages(t, got) != "app=nginx:1" {
			t.Errorf("containers %s", containerImages(t, got))
		}
		if got.GetName() != "web" || got.GetNamespace() != "default" {
			t.Errorf("name %s/%s", got.GetNamespace(), got.GetName())
		}
		if managerNames(got) != "kubectl/Apply" {
			t.Errorf("managers %s", managerNames(got))
		}
	})

	t.Run("create fills the namespace from the request", func(t *testing.T) {
		cfg := strings.Replace(webConfig("2", "app=nginx:1"), "  namespace: default\n", "", 1)
		got := mustApply(t, nil, cfg, Options{FieldManager: "kubectl", Namespace: testutil.Ptr("prod"), Name: "web"})
		if got.GetNamespace() != "prod" {
			t.Errorf("namespace %q", got.GetNamespace())
		}
	})

	t.Run("fields this manager stops applying are removed", func(t *testing.T) {
		cur := mustApply(t, nil, webConfig("2", "app=nginx:1"), kubectl)
		got := mustApply(t, cur, webConfig("", "app=nginx:1"), kubectl)
		wantAbsent(t, got, "spec", "replicas")
	})

	t.Run("fields owned by another manager stay", func(t *testing.T) {
		cur := mustApply(t, nil, webConfig("", "app=nginx:1"), kubectl)
		// The HPA (or anyone) sets replicas with an update.
		cur = update(t, cur, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(9), "spec", "replicas")
		}, "hpa", builtinConverter)
		got := mustApply(t, cur, webConfig("", "app=nginx:2"), kubectl)
		wantValue(t, got, int64(9), "spec", "replicas")
		if containerImages(t, got) != "app=nginx:2" {
			t.Errorf("containers %s", containerImages(t, got))
		}
		if managerNames(got) != "hpa/Update,kubectl/Apply" {
			t.Errorf("managers %s", managerNames(got))
		}
	})

	t.Run("with the built-in schema containers merge by name", func(t *testing.T) {
		cur := mustApply(t, nil, webConfig("2", "app=nginx:1"), kubectl)
		// A webhook-like injector adds a sidecar with an update.
		cur = update(t, cur, func(u *unstructured.Unstructured) {
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			cs = append(cs, map[string]interface{}{"name": "sidecar", "image": "envoy:1"})
			_ = unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers")
		}, "injector", builtinConverter)
		got := mustApply(t, cur, webConfig("2", "app=nginx:2"), kubectl)
		if containerImages(t, got) != "app=nginx:2,sidecar=envoy:1" {
			t.Errorf("containers %s", containerImages(t, got))
		}
	})

	t.Run("without a schema lists are atomic", func(t *testing.T) {
		cur := mustApply(t, nil, webConfig("2", "app=nginx:1"), deducedKubectl)
		cur = update(t, cur, func(u *unstructured.Unstructured) {
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			cs = append(cs, map[string]interface{}{"name": "sidecar", "image": "envoy:1"})
			_ = unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers")
		}, "injector", managedfields.NewDeducedTypeConverter())
		// The injector now owns the whole (atomic) list: conflict ...
		_, err := Apply(types.ApplyYAMLPatchType, cur, []byte(webConfig("2", "app=nginx:2")), deducedKubectl)
		testutil.WantStatusError(t, err, 409, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "injector" using apps/v1: .spec.template.spec.containers`)
		// ... and forcing replaces it wholesale.
		got, err := Apply(types.ApplyYAMLPatchType, cur, []byte(webConfig("2", "app=nginx:2")), Options{FieldManager: "kubectl", Force: testutil.Ptr(true)})
		if err != nil {
			t.Fatal(err)
		}
		if containerImages(t, got) != "app=nginx:2" {
			t.Errorf("containers %s", containerImages(t, got))
		}
	})

	t.Run("conflicts with a controller are 409, force takes over", func(t *testing.T) {
		cur := mustApply(t, nil, webConfig("2", "app=nginx:1"), Options{FieldManager: "app-controller", TypeConverter: builtinConverter})
		_, err := Apply(types.ApplyYAMLPatchType, cur, []byte(webConfig("5", "app=nginx:1")), kubectl)
		testutil.WantStatusError(t, err, 409, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "app-controller": .spec.replicas`)

		forced := kubectl
		forced.Force = testutil.Ptr(true)
		got, err := Apply(types.ApplyYAMLPatchType, cur, []byte(webConfig("5", "app=nginx:1")), forced)
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, got, int64(5), "spec", "replicas")
	})

	t.Run("same value from two managers is shared, not a conflict", func(t *testing.T) {
		cur := mustApply(t, nil, webConfig("2", "app=nginx:1"), Options{FieldManager: "app-controller", TypeConverter: builtinConverter})
		got := mustApply(t, cur, webConfig("2", "app=nginx:1"), kubectl)
		if managerNames(got) != "app-controller/Apply,kubectl/Apply" {
			t.Errorf("managers %s", managerNames(got))
		}
	})

	t.Run("an object without managedFields is owned by before-first-apply", func(t *testing.T) {
		cfg := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 5\n"
		_, err := Apply(types.ApplyYAMLPatchType, currentDeployment(t), []byte(cfg), kubectl)
		testutil.WantStatusError(t, err, 409, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "before-first-apply" using apps/v1: .spec.replicas`)
	})

	t.Run("cbor apply", func(t *testing.T) {
		cfg := map[string]interface{}{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]interface{}{"name": "web", "namespace": "default"},
			"spec":     map[string]interface{}{"replicas": int64(4)},
		}
		b, err := cbor.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b = append([]byte{0xd9, 0xd9, 0xf7}, b...)
		cur := mustApply(t, nil, webConfig("2", "app=nginx:1"), kubectl)
		got, err := Apply(types.ApplyCBORPatchType, cur, b, kubectl)
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, got, int64(4), "spec", "replicas")
	})
}

func TestServerSideApplyErrors(t *testing.T) {
	cur := mustApply(t, nil, webConfig("2", "app=nginx:1"), Options{FieldManager: "kubectl"})
	tests := []struct {
		name      string
		patchType types.PatchType
		patch     string
		opts      Options
		current   *unstructured.Unstructured
		err       errWant
	}{
		{name: "no field manager", patch: webConfig("2", "app=nginx:1"), opts: Options{},
			err: errWant{422, metav1.StatusReasonInvalid, `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`}},
		{name: "field manager too long", patch: webConfig("2", "app=nginx:1"), opts: Options{FieldManager: strings.Repeat("m", 129)},
			err: errWant{422, metav1.StatusReasonInvalid, `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be more than 128 bytes`}},
		{name: "other version", patch: strings.Replace(webConfig("2", "app=nginx:1"), "apps/v1", "apps/v1beta2", 1), opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `invalid object type: apps/v1beta2, Kind=Deployment`}},
		{name: "other kind", patch: strings.Replace(webConfig("2", "app=nginx:1"), "Deployment", "StatefulSet", 1), opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `invalid object type: apps/v1, Kind=StatefulSet`}},
		{name: "no apiVersion and kind", patch: "metadata:\n  name: web\n", opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `invalid object type: /, Kind=`}},
		{name: "create without kind", patch: "metadata:\n  name: web\n", opts: Options{FieldManager: "m"}, current: &unstructured.Unstructured{},
			err: errWant{400, metav1.StatusReasonBadRequest, `invalid object type: /, Kind=`}},
		{name: "managedFields set", patch: strings.Replace(webConfig("2", "app=nginx:1"), "  namespace: default\n", "  namespace: default\n  managedFields: [{manager: x}]\n", 1), opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `metadata.managedFields must be nil`}},
		{name: "invalid YAML", patch: "kind: [", opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `error decoding YAML: the request body is not valid YAML: yaml: line 1: did not find expected node content`}},
		{name: "YAML stream", patch: webConfig("2", "app=nginx:1") + "---\n" + webConfig("3"), opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `error decoding YAML: the YAML request body contains 2 documents separated by "---": send exactly one object per request`}},
		{name: "YAML list", patch: "- a\n", opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `error decoding YAML: the apply configuration must be an object, got an array`}},
		{name: "invalid CBOR", patchType: types.ApplyCBORPatchType, patch: "\xd9\xd9\xf7\xa1", opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `error decoding CBOR: unexpected EOF`}},
		{name: "field not in the schema", patch: webConfig("2", "app=nginx:1") + "  frobnicate: true\n", opts: Options{FieldManager: "m", TypeConverter: builtinConverter},
			err: errWant{400, metav1.StatusReasonBadRequest, `failed to create typed patch object (default/web; apps/v1, Kind=Deployment): .spec.frobnicate: field not declared in schema`}},
		{name: "wrong name", patch: strings.Replace(webConfig("2", "app=nginx:1"), "name: web", "name: other", 1), opts: Options{FieldManager: "m"},
			err: errWant{400, metav1.StatusReasonBadRequest, `the patch sets metadata.name, which does not match the name on the URL (web)`}},
		{name: "wrong namespace", patch: webConfig("2", "app=nginx:1"), opts: Options{FieldManager: "m", Namespace: testutil.Ptr("prod")},
			err: errWant{400, metav1.StatusReasonBadRequest, `the patch sets metadata.namespace, which does not match the namespace on the request (prod)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pt := tt.patchType
			if pt == "" {
				pt = types.ApplyYAMLPatchType
			}
			current := cur
			if tt.current != nil {
				current = nil
			}
			got, err := Apply(pt, current, []byte(tt.patch), tt.opts)
			if err == nil {
				t.Fatalf("expected an error, got %s", jsonOf(t, got.Object))
			}
			testutil.WantStatusError(t, err, tt.err.code, tt.err.reason, tt.err.msg)
		})
	}
}

// widgetSchema is the OpenAPI of a CRD whose spec.ports is a list-map keyed by
// name, as the apiextensions-apiserver would publish it.
func widgetTypeConverter(t testing.TB) managedfields.TypeConverter {
	t.Helper()
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}}}
	integer := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"integer"}}}
	port := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Required: []string{"name"},
		Properties: map[string]spec.Schema{"name": str, "port": integer}}}
	ports := spec.Schema{
		SchemaProps:      spec.SchemaProps{Type: []string{"array"}, Items: &spec.SchemaOrArray{Schema: &port}},
		VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": []interface{}{"name"}}},
	}
	metadata := spec.Schema{
		SchemaProps:      spec.SchemaProps{Type: []string{"object"}},
		VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-preserve-unknown-fields": true}},
	}
	widget := &spec.Schema{
		SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
			"apiVersion": str, "kind": str, "metadata": metadata,
			"spec": {SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{"ports": ports, "size": integer}}},
		}},
		VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{
			"x-kubernetes-group-version-kind": []interface{}{map[string]interface{}{"group": "example.com", "version": "v1", "kind": "Widget"}},
		}},
	}
	tc, err := managedfields.NewTypeConverter(map[string]*spec.Schema{"com.example.v1.Widget": widget}, false)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func TestServerSideApplyCustomResource(t *testing.T) {
	widgetCfg := func(ports ...string) string {
		var b strings.Builder
		b.WriteString("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: default\nspec:\n  ports:\n")
		for _, p := range ports {
			name, port, _ := strings.Cut(p, "=")
			b.WriteString("  - name: " + name + "\n    port: " + port + "\n")
		}
		return b.String()
	}
	portsOf := func(u *unstructured.Unstructured) string {
		ps, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
		var out []string
		for _, p := range ps {
			m := p.(map[string]interface{})
			out = append(out, m["name"].(string))
		}
		return strings.Join(out, ",")
	}

	t.Run("OpenAPI converter merges list-maps like the apiserver", func(t *testing.T) {
		tc := NewBuiltinTypeConverter(widgetTypeConverter(t))
		cur := mustApply(t, nil, widgetCfg("http=80"), Options{FieldManager: "a", TypeConverter: tc})
		got := mustApply(t, cur, widgetCfg("https=443"), Options{FieldManager: "b", TypeConverter: tc})
		if portsOf(got) != "http,https" {
			t.Errorf("ports %s", portsOf(got))
		}
	})

	t.Run("deduced converter treats the list as atomic", func(t *testing.T) {
		cur := mustApply(t, nil, widgetCfg("http=80"), Options{FieldManager: "a"})
		_, err := Apply(types.ApplyYAMLPatchType, cur, []byte(widgetCfg("https=443")), Options{FieldManager: "b"})
		testutil.WantStatusError(t, err, 409, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "a": .spec.ports`)
	})

	t.Run("create", func(t *testing.T) {
		got := mustApply(t, nil, widgetCfg("http=80"), Options{FieldManager: "a", Kind: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}})
		if portsOf(got) != "http" {
			t.Errorf("ports %s", portsOf(got))
		}
	})
}
