package patch

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// A patch given the proxy's precondition (the version the decision was
// made on, 200) must still apply to that version, and must not land on a
// newer one (201): kube-apiserver applies a patch to the stored object and
// updates unconditionally when the patched object names no
// resourceVersion, or names the stored one. Each patch is checked by
// applying it, not by reading its operations.
func TestWithResourceVersionPinsWhatKubeApiserverApplies(t *testing.T) {
	stored := func(rv string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": rv,
				"labels":      map[string]any{"empty": ""},
				"annotations": map[string]any{"kausality.io/updaters": "aaaaa"}},
			"data": map[string]any{"k": "v"},
		}}
	}
	opts := Options{Name: "c", FieldManager: "client"}
	for _, tc := range []struct {
		name  string
		pt    types.PatchType
		patch string
	}{
		{"JSON patch: the resourceVersion moved away after a replace", types.JSONPatchType,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":"200"},{"op":"move","from":"/metadata/resourceVersion","path":"/metadata/labels/rv"},{"op":"replace","path":"/metadata/annotations/kausality.io~1updaters","value":"aaaaa"}]`},
		{"JSON patch: an empty value copied over the resourceVersion after an add", types.JSONPatchType,
			`[{"op":"add","path":"/metadata/resourceVersion","value":"200"},{"op":"copy","from":"/metadata/labels/empty","path":"/metadata/resourceVersion"}]`},
		{"JSON patch: removed, then tested to be absent", types.JSONPatchType,
			`[{"op":"remove","path":"/metadata/resourceVersion"},{"op":"test","path":"/metadata/resourceVersion","value":null}]`},
		{"JSON patch: replaced with an empty one", types.JSONPatchType,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":""}]`},
		{"merge patch: cleared", types.MergePatchType, `{"metadata":{"resourceVersion":null}}`},
		{"JSON patch: removed through a path with a prefix the library ignores", types.JSONPatchType,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":"200"},{"op":"remove","path":"x/metadata/resourceVersion"}]`},
		{"JSON patch: moved away from a path with a prefix", types.JSONPatchType,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":"200"},{"op":"move","from":"x/metadata/resourceVersion","path":"/metadata/labels/rv"}]`},
		{"JSON patch: metadata replaced through a path with a prefix", types.JSONPatchType,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":"200"},{"op":"replace","path":"x/metadata","value":{"name":"c","namespace":"ns"}}]`},
		{"JSON patch: the whole object replaced without one", types.JSONPatchType,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":"200"},{"op":"replace","path":"","value":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}}]`},
		{"apply: metadata null", types.ApplyYAMLPatchType, "apiVersion: v1\nkind: ConfigMap\nmetadata: null\n"},
		{"strategic merge patch: $retainKeys on metadata without resourceVersion", types.StrategicMergePatchType,
			`{"metadata":{"$retainKeys":["name","namespace","uid","labels","annotations"],"name":"c","annotations":{"kausality.io/updaters":"aaaaa"}}}`},
		{"strategic merge patch: $retainKeys naming it, with an empty one", types.StrategicMergePatchType,
			`{"metadata":{"$retainKeys":["name","namespace","uid","labels","annotations","resourceVersion"],"name":"c","resourceVersion":""}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patched, err := Apply(tc.pt, stored("200"), []byte(tc.patch), opts)
			if err != nil {
				t.Fatalf("the client's patch does not apply to the stored object: %v", err)
			}
			pinned, ok, err := WithResourceVersion(tc.pt, []byte(tc.patch), "200", patched)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := Apply(tc.pt, stored("200"), pinned, opts); err != nil {
				t.Errorf("with the proxy's precondition (ok=%v) the patch no longer applies to the version it was decided on: %v\n%s", ok, err, pinned)
			} else if rv := got.GetResourceVersion(); rv != "200" {
				t.Errorf("on version 200 the patched object names resourceVersion %q (ok=%v)\n%s", rv, ok, pinned)
			}
			if got, err := Apply(tc.pt, stored("201"), pinned, opts); err == nil {
				if rv := got.GetResourceVersion(); rv == "" || rv == "201" {
					t.Errorf("the patch (ok=%v) lands on the newer version 201: the patched object names resourceVersion %q\n%s", ok, rv, pinned)
				}
			}
		})
	}
}

// A resourceVersion the client's own operations give the object, copied
// from a member the proxy cannot see in the patch, is the client's
// precondition: kube-apiserver refuses the write on a newer object, and
// the proxy must not replace it with its own.
func TestWithResourceVersionKeepsAVersionTheClientCopiesIn(t *testing.T) {
	stored := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "ns", "resourceVersion": "200", "labels": map[string]any{"old": "150"}},
	}}
	for _, op := range []string{"copy", "move"} {
		p := `[{"op":"` + op + `","from":"/metadata/labels/old","path":"/metadata/resourceVersion"}]`
		patched, err := Apply(types.JSONPatchType, stored, []byte(p), Options{Name: "c"})
		if err != nil {
			t.Fatal(err)
		}
		out, ok, err := WithResourceVersion(types.JSONPatchType, []byte(p), "200", patched)
		if err != nil || ok || string(out) != p {
			t.Errorf("%s: %s, ok=%v, %v; want the client's patch as it is", op, out, ok, err)
		}
	}
}

// A pinned JSON patch at kube-apiserver's operation limit would be
// refused; the client's own is kept instead.
func TestWithResourceVersionKeepsAPatchAtTheOperationLimit(t *testing.T) {
	ops := make([]string, MaxJSONPatchOperations)
	for i := range ops {
		ops[i] = `{"op":"add","path":"/metadata/labels/a","value":"b"}`
	}
	p := "[" + strings.Join(ops, ",") + "]"
	out, ok, err := WithResourceVersion(types.JSONPatchType, []byte(p), "200", nil)
	if err != nil || ok || string(out) != p {
		t.Errorf("ok=%v, %v; want the client's patch of %d operations as it is", ok, err, MaxJSONPatchOperations)
	}
}
