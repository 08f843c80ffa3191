package patch

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/kausality-io/kausality-proxy/internal/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
)

const (
	traceKey    = "kausality.io/trace"
	approvalKey = "kausality.io/approvals"
	revKey      = "deployment.kubernetes.io/revision"
)

func withAnnotations(u *unstructured.Unstructured, ann map[string]string) *unstructured.Unstructured {
	u = u.DeepCopy()
	u.SetAnnotations(ann)
	return u
}

// stripAnnotations returns u without annotations and managedFields, for
// comparing everything else.
func stripAnnotations(u *unstructured.Unstructured) map[string]interface{} {
	c := u.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata", "annotations")
	unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
	if m, ok := c.Object["metadata"].(map[string]interface{}); ok && len(m) == 0 {
		delete(c.Object, "metadata")
	}
	return c.Object
}

func TestAddAnnotations(t *testing.T) {
	trace := `[{"kind":"App","name":"web"}]`
	setTrace := map[string]*string{traceKey: &trace}
	setTraceDropApproval := map[string]*string{traceKey: &trace, approvalKey: nil}

	base := currentDeployment(t) // annotations: revision
	withApproval := withAnnotations(base, map[string]string{revKey: "4", approvalKey: "[]"})
	noAnnotations := withAnnotations(base, nil)
	noMetadataWidget := widgetObject()

	applied := mustApply(t, nil, webConfig("2", "app=nginx:1")+"", Options{FieldManager: "kubectl", TypeConverter: builtinConverter})
	// kubectl applied approvals before; the controller set "owned-by-other".
	appliedWithApproval := mustApply(t, applied, webConfig("2", "app=nginx:1")+"", Options{FieldManager: "kubectl", TypeConverter: builtinConverter})
	appliedWithApproval = mustApply(t, appliedWithApproval,
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n  annotations:\n    kausality.io/approvals: \"[]\"\n",
		Options{FieldManager: "approver", TypeConverter: builtinConverter})
	appliedOwn := mustApply(t, applied, webConfig("2", "app=nginx:1")[:len("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n")]+
		"  annotations:\n    kausality.io/approvals: \"[]\"\n"+webConfig("2", "app=nginx:1")[len("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n"):],
		Options{FieldManager: "kubectl", TypeConverter: builtinConverter})

	cborPatch := func(m map[string]interface{}) string {
		b, err := cbor.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(append([]byte{0xd9, 0xd9, 0xf7}, b...))
	}

	tests := []struct {
		name        string
		patchType   types.PatchType
		current     *unstructured.Unstructured
		patch       string
		annotations map[string]*string
		opts        Options
		want        map[string]string // annotations of the result
		err         error             // errors.Is target, or a *errWant below
		status      *errWant
	}{
		// merge patch
		{name: "merge: patch without metadata", patchType: types.MergePatchType, current: withApproval,
			patch: `{"spec":{"replicas":5}}`, annotations: setTraceDropApproval, want: map[string]string{revKey: "4", traceKey: trace}},
		{name: "merge: user annotations and labels kept", patchType: types.MergePatchType, current: base,
			patch: `{"metadata":{"labels":{"x":"y"},"annotations":{"user":"1","` + revKey + `":null}},"spec":{"paused":true}}`, annotations: setTrace,
			want: map[string]string{"user": "1", traceKey: trace}},
		{name: "merge: object without annotations", patchType: types.MergePatchType, current: noAnnotations,
			patch: `{}`, annotations: setTraceDropApproval, want: map[string]string{traceKey: trace}},
		{name: "merge: ours override the user's value for the same key", patchType: types.MergePatchType, current: base,
			patch: `{"metadata":{"annotations":{"` + traceKey + `":"forged"}}}`, annotations: setTrace, want: map[string]string{revKey: "4", traceKey: trace}},
		{name: "merge: custom resource", patchType: types.MergePatchType, current: noMetadataWidget,
			patch: `{"spec":{"size":9}}`, annotations: setTrace, want: map[string]string{traceKey: trace}},
		{name: "merge: annotations null is not rewritable", patchType: types.MergePatchType, current: base,
			patch: `{"metadata":{"annotations":null}}`, annotations: setTrace, err: ErrNotRewritable},
		{name: "merge: metadata null is not rewritable", patchType: types.MergePatchType, current: base,
			patch: `{"metadata":null}`, annotations: setTrace, err: ErrNotRewritable},
		{name: "merge: not an object", patchType: types.MergePatchType, current: base, patch: `[1]`, annotations: setTrace,
			status: &errWant{400, metav1.StatusReasonBadRequest, "the merge patch is not a JSON object: json: cannot unmarshal array into Go value of type map[string]json.RawMessage"}},
		{name: "merge: metadata not an object", patchType: types.MergePatchType, current: base, patch: `{"metadata":"x"}`, annotations: setTrace,
			status: &errWant{400, metav1.StatusReasonBadRequest, "the merge patch has a metadata that is not an object: json: cannot unmarshal string into Go value of type map[string]json.RawMessage"}},

		// strategic merge patch
		{name: "smp: patch with a list merge", patchType: types.StrategicMergePatchType, current: withApproval,
			patch: `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}}}`, annotations: setTraceDropApproval,
			want: map[string]string{revKey: "4", traceKey: trace}},
		{name: "smp: annotations null becomes replace", patchType: types.StrategicMergePatchType, current: withApproval,
			patch: `{"metadata":{"annotations":null}}`, annotations: setTraceDropApproval, want: map[string]string{traceKey: trace}},
		{name: "smp: $patch delete becomes replace", patchType: types.StrategicMergePatchType, current: withApproval,
			patch: `{"metadata":{"annotations":{"$patch":"delete"}}}`, annotations: setTrace, want: map[string]string{traceKey: trace}},
		{name: "smp: $patch replace keeps the user's keys", patchType: types.StrategicMergePatchType, current: withApproval,
			patch: `{"metadata":{"annotations":{"$patch":"replace","user":"1","` + approvalKey + `":"[]"}}}`, annotations: setTraceDropApproval,
			want: map[string]string{"user": "1", traceKey: trace}},
		{name: "smp: metadata null is not rewritable", patchType: types.StrategicMergePatchType, current: base,
			patch: `{"metadata":null}`, annotations: setTrace, err: ErrNotRewritable},

		// JSON patch
		{name: "json: annotations exist", patchType: types.JSONPatchType, current: withApproval,
			patch: `[{"op":"replace","path":"/spec/replicas","value":5}]`, annotations: setTraceDropApproval,
			want: map[string]string{revKey: "4", traceKey: trace}},
		{name: "json: no annotations map", patchType: types.JSONPatchType, current: noAnnotations,
			patch: `[{"op":"replace","path":"/spec/replicas","value":5}]`, annotations: setTraceDropApproval, want: map[string]string{traceKey: trace}},
		{name: "json: only removals of absent keys", patchType: types.JSONPatchType, current: noAnnotations,
			patch: `[]`, annotations: map[string]*string{approvalKey: nil}, want: nil},
		{name: "json: removal of an absent key in an existing map", patchType: types.JSONPatchType, current: base,
			patch: `[]`, annotations: map[string]*string{approvalKey: nil}, want: map[string]string{revKey: "4"}},
		{name: "json: the patch removes the annotations map", patchType: types.JSONPatchType, current: withApproval,
			patch: `[{"op":"remove","path":"/metadata/annotations"}]`, annotations: setTraceDropApproval, want: map[string]string{traceKey: trace}},
		{name: "json: the patch creates the annotations map", patchType: types.JSONPatchType, current: noAnnotations,
			patch: `[{"op":"add","path":"/metadata/annotations","value":{"user":"1"}}]`, annotations: setTrace, want: map[string]string{"user": "1", traceKey: trace}},
		{name: "json: keys with / and ~ and empty values", patchType: types.JSONPatchType, current: base,
			patch: `[]`, annotations: map[string]*string{"a/b~c": testutil.Ptr(""), "x~1": testutil.Ptr("v")}, want: map[string]string{revKey: "4", "a/b~c": "", "x~1": "v"}},
		{name: "json: object without metadata", patchType: types.JSONPatchType,
			current: &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget", "spec": map[string]interface{}{}}},
			patch:   `[]`, annotations: setTrace, want: map[string]string{traceKey: trace}},
		{name: "json: not an array", patchType: types.JSONPatchType, current: base, patch: `{}`, annotations: setTrace,
			status: &errWant{400, metav1.StatusReasonBadRequest, "the JSON patch is not a JSON array of operations: json: cannot unmarshal object into Go value of type []json.RawMessage"}},

		// apply
		{name: "apply: create", patchType: types.ApplyYAMLPatchType, current: nil, opts: Options{FieldManager: "kubectl", TypeConverter: builtinConverter},
			patch: webConfig("2", "app=nginx:1"), annotations: setTrace, want: map[string]string{traceKey: trace}},
		{name: "apply: update keeps others' annotations", patchType: types.ApplyYAMLPatchType, current: appliedWithApproval, opts: Options{FieldManager: "kubectl", TypeConverter: builtinConverter},
			patch: webConfig("3", "app=nginx:1"), annotations: setTrace, want: map[string]string{approvalKey: "[]", traceKey: trace}},
		{name: "apply: removal of an annotation another manager owns does nothing", patchType: types.ApplyYAMLPatchType, current: appliedWithApproval, opts: Options{FieldManager: "kubectl", TypeConverter: builtinConverter},
			patch: webConfig("3", "app=nginx:1"), annotations: setTraceDropApproval, want: map[string]string{approvalKey: "[]", traceKey: trace}},
		{name: "apply: removal of an annotation this manager owned removes it", patchType: types.ApplyYAMLPatchType, current: appliedOwn, opts: Options{FieldManager: "kubectl", TypeConverter: builtinConverter},
			patch:       "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n  annotations:\n    kausality.io/approvals: \"[]\"\n" + webConfig("3", "app=nginx:1")[len("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n"):],
			annotations: setTraceDropApproval, want: map[string]string{traceKey: trace}},
		{name: "apply: cbor", patchType: types.ApplyCBORPatchType, current: applied, opts: Options{FieldManager: "kubectl", TypeConverter: builtinConverter},
			patch:       cborPatch(map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]interface{}{"name": "web", "namespace": "default", "annotations": map[string]interface{}{"user": "1"}}}),
			annotations: setTrace, want: map[string]string{"user": "1", traceKey: trace}},
		{name: "apply: metadata not an object", patchType: types.ApplyYAMLPatchType, current: applied, opts: Options{FieldManager: "kubectl"},
			patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata: 3\n", annotations: setTrace,
			status: &errWant{400, metav1.StatusReasonBadRequest, "the apply configuration has a metadata that is not an object (a number)"}},

		{name: "unknown patch type", patchType: "application/json", current: base, patch: `{}`, annotations: setTrace,
			status: &errWant{415, metav1.StatusReasonUnsupportedMediaType, "the body of the request was in an unknown format - accepted media types include: " + allPatchTypes}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var effective *unstructured.Unstructured
			if tt.status == nil || tt.status.code != 415 {
				var err error
				if effective, err = Apply(tt.patchType, tt.current, []byte(tt.patch), tt.opts); err != nil && tt.status == nil && tt.err == nil {
					t.Fatalf("the original patch does not apply: %v", err)
				}
			}
			rewritten, err := AddAnnotations(tt.patchType, []byte(tt.patch), tt.annotations, effective)
			switch {
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Fatalf("got error %v, want %v", err, tt.err)
				}
				return
			case tt.status != nil:
				testutil.WantStatusError(t, err, tt.status.code, tt.status.reason, tt.status.msg)
				return
			case err != nil:
				t.Fatalf("unexpected error: %v", err)
			}
			got, err := Apply(tt.patchType, tt.current, rewritten, tt.opts)
			if err != nil {
				t.Fatalf("the rewritten patch does not apply: %v\n%s", err, rewritten)
			}
			if ann := got.GetAnnotations(); !reflect.DeepEqual(ann, tt.want) {
				t.Errorf("annotations = %v, want %v\nrewritten patch: %s", ann, tt.want, rewritten)
			}
			if !reflect.DeepEqual(stripAnnotations(got), stripAnnotations(effective)) {
				t.Errorf("the rewritten patch changed more than annotations:\n got: %s\nwant: %s", jsonOf(t, stripAnnotations(got)), jsonOf(t, stripAnnotations(effective)))
			}
			if tt.patchType == types.ApplyCBORPatchType && !bytes.HasPrefix(rewritten, []byte{0xd9, 0xd9, 0xf7}) {
				t.Errorf("CBOR apply patch lost its self-described tag")
			}
		})
	}
}

func TestAddAnnotationsKeepsUserBytes(t *testing.T) {
	// The user's part of a merge patch passes through unchanged (number
	// formatting included); only metadata.annotations is re-encoded.
	patch := []byte(`{"spec":{"replicas":1e1,"x":1.50},"metadata":{"labels":{"b":"1","a":"2"}}}`)
	out, err := AddAnnotations(types.MergePatchType, patch, map[string]*string{"k": testutil.Ptr("v")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{"k":"v"},"labels":{"b":"1","a":"2"}},"spec":{"replicas":1e1,"x":1.50}}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}

	// JSON patch: user operations are kept verbatim, ours appended.
	out, err = AddAnnotations(types.JSONPatchType, []byte(`[{"op":"test","path":"/spec/replicas","value":3}]`),
		map[string]*string{"example.com/a~b": testutil.Ptr("v"), "gone": nil}, withAnnotations(currentDeployment(t), map[string]string{"gone": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	want = `[{"op":"test","path":"/spec/replicas","value":3},{"op":"add","path":"/metadata/annotations/example.com~1a~0b","value":"v"},{"op":"remove","path":"/metadata/annotations/gone"}]`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}

	// No annotations: the patch is returned as is.
	out, _ = AddAnnotations(types.MergePatchType, patch, nil, nil)
	if !bytes.Equal(out, patch) {
		t.Errorf("patch changed without annotations")
	}
}

func TestEscapeJSONPointer(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "a/b": "a~1b", "a~b": "a~0b", "~/": "~0~1", "~1": "~01"} {
		if got := EscapeJSONPointer(in); got != want {
			t.Errorf("EscapeJSONPointer(%q) = %q, want %q", in, got, want)
		}
	}
}
