package patch

import (
	"errors"
	"fmt"
	"reflect"
	runtime2 "runtime"
	"strings"
	"testing"

	"github.com/kausality-io/kausality-proxy/internal/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

const crdPatchTypes = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
const allPatchTypes = "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml, application/apply-patch+cbor"

func widgetObject() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata":   map[string]interface{}{"name": "w", "namespace": "default", "uid": "u-w"},
		"spec":       map[string]interface{}{"size": int64(3), "tags": []interface{}{"a", "b"}},
	}}
}

type errWant struct {
	code   int32
	reason metav1.StatusReason
	msg    string
}

// TestApplyNonApply covers JSON patch, merge patch and strategic merge patch.
func TestApplyNonApply(t *testing.T) {
	tooMany := "[" + strings.Repeat(`{"op":"test","path":"/kind","value":"Deployment"},`, MaxJSONPatchOperations) + `{"op":"test","path":"/kind","value":"Deployment"}]`

	tests := []struct {
		name      string
		patchType types.PatchType
		current   *unstructured.Unstructured // nil: the Deployment
		noCurrent bool
		patch     string
		opts      Options
		check     func(t *testing.T, got *unstructured.Unstructured)
		err       *errWant
	}{
		// JSON patch
		{name: "json patch replace", patchType: types.JSONPatchType, patch: `[{"op":"replace","path":"/spec/replicas","value":5}]`,
			check: func(t *testing.T, got *unstructured.Unstructured) { wantValue(t, got, int64(5), "spec", "replicas") }},
		{name: "json patch test then replace", patchType: types.JSONPatchType,
			patch: `[{"op":"test","path":"/spec/replicas","value":3},{"op":"replace","path":"/spec/template/spec/containers/1/image","value":"envoy:1.31"}]`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, "envoy:1.31", "spec", "template", "spec", "containers", "1", "image")
				wantValue(t, got, "nginx:1.25", "spec", "template", "spec", "containers", "0", "image")
			}},
		{name: "json patch escaped pointer", patchType: types.JSONPatchType, patch: `[{"op":"add","path":"/metadata/labels/example.com~1a~0b","value":"x"}]`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, "x", "metadata", "labels", "example.com/a~b")
			}},
		{name: "json patch replace of a missing key adds it (json-patch v4, as in kube-apiserver)", patchType: types.JSONPatchType, patch: `[{"op":"replace","path":"/spec/paused","value":true}]`,
			check: func(t *testing.T, got *unstructured.Unstructured) { wantValue(t, got, true, "spec", "paused") }},
		{name: "json patch removing kind keeps the kind", patchType: types.JSONPatchType, patch: `[{"op":"remove","path":"/kind"},{"op":"remove","path":"/apiVersion"}]`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				if got.GroupVersionKind() != (schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}) {
					t.Errorf("gvk %v", got.GroupVersionKind())
				}
			}},
		{name: "json patch on a custom resource", patchType: types.JSONPatchType, current: widgetObject(), patch: `[{"op":"add","path":"/spec/tags/-","value":"c"}]`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, []interface{}{"a", "b", "c"}, "spec", "tags")
			}},
		{name: "json patch test failure", patchType: types.JSONPatchType, patch: `[{"op":"test","path":"/spec/replicas","value":2},{"op":"replace","path":"/spec/replicas","value":5}]`,
			err: &errWant{422, metav1.StatusReasonInvalid, `Deployment.apps "web" is invalid: patch: Invalid value: the JSON patch cannot be applied: testing value /spec/replicas failed: test failed`}},
		{name: "json patch remove of a missing key", patchType: types.JSONPatchType, patch: `[{"op":"remove","path":"/metadata/annotations/nope"}]`,
			err: &errWant{422, metav1.StatusReasonInvalid, `Deployment.apps "web" is invalid: patch: Invalid value: the JSON patch cannot be applied: error in remove for path: '/metadata/annotations/nope': Unable to remove nonexistent key: nope: missing value`}},
		{name: "json patch unknown op", patchType: types.JSONPatchType, patch: `[{"op":"frob","path":"/spec"}]`,
			err: &errWant{422, metav1.StatusReasonInvalid, `Deployment.apps "web" is invalid: patch: Invalid value: the JSON patch cannot be applied: Unexpected kind: frob`}},
		{name: "json patch not an array", patchType: types.JSONPatchType, patch: `{"op":"add","path":"/spec/paused","value":true}`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the JSON patch cannot be decoded: json: cannot unmarshal object into Go value of type jsonpatch.Patch`}},
		{name: "json patch syntax error", patchType: types.JSONPatchType, patch: `[{"op":"add",]`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the JSON patch cannot be decoded: invalid character ']' looking for beginning of object key string`}},
		{name: "json patch too many operations", patchType: types.JSONPatchType, patch: tooMany,
			err: &errWant{413, metav1.StatusReasonRequestEntityTooLarge, `Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001`}},
		{name: "json patch changing the kind", patchType: types.JSONPatchType, patch: `[{"op":"replace","path":"/kind","value":"StatefulSet"}]`,
			err: &errWant{422, metav1.StatusReasonInvalid, `Deployment.apps "web" is invalid: patch: Invalid value: the patch changes kind; a patch cannot change the type of an object`}},
		{name: "json patch with a wrongly typed value", patchType: types.JSONPatchType, patch: `[{"op":"replace","path":"/spec/replicas","value":"five"}]`,
			err: &errWant{422, metav1.StatusReasonInvalid, `Deployment.apps "web" is invalid: patch: Invalid value: the patched object is not a valid Deployment: unrecognized type: int32`}},
		{name: "json patch renaming the object", patchType: types.JSONPatchType, patch: `[{"op":"replace","path":"/metadata/name","value":"other"}]`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the patch sets metadata.name, which does not match the name on the URL (web)`}},
		{name: "json patch moving the object to another namespace", patchType: types.JSONPatchType, patch: `[{"op":"replace","path":"/metadata/namespace","value":"other"}]`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the patch sets metadata.namespace, which does not match the namespace on the request (default)`}},
		{name: "json patch without an object", patchType: types.JSONPatchType, noCurrent: true, patch: `[]`, opts: Options{Name: "web"},
			err: &errWant{404, metav1.StatusReasonNotFound, `"web" does not exist: only an apply patch can create an object`}},
		{name: "json patch with force", patchType: types.JSONPatchType, patch: `[]`, opts: Options{Force: testutil.Ptr(true)},
			err: &errWant{422, metav1.StatusReasonInvalid, `PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`}},

		// merge patch
		{name: "merge patch", patchType: types.MergePatchType, patch: `{"spec":{"replicas":7,"paused":true}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, int64(7), "spec", "replicas")
				wantValue(t, got, true, "spec", "paused")
			}},
		{name: "merge patch null removes", patchType: types.MergePatchType, patch: `{"spec":{"replicas":null},"metadata":{"annotations":null}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantAbsent(t, got, "spec", "replicas")
				wantAbsent(t, got, "metadata", "annotations")
			}},
		{name: "merge patch replaces lists wholesale", patchType: types.MergePatchType, patch: `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, []interface{}{map[string]interface{}{"name": "app", "image": "nginx:2"}}, "spec", "template", "spec", "containers")
			}},
		{name: "merge patch on a custom resource", patchType: types.MergePatchType, current: widgetObject(), patch: `{"spec":{"size":4,"color":"red"}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, int64(4), "spec", "size")
				wantValue(t, got, "red", "spec", "color")
			}},
		{name: "merge patch keeps unknown fields", patchType: types.MergePatchType, patch: `{"spec":{"futureField":{"a":1}}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, int64(1), "spec", "futureField", "a")
			}},
		{name: "merge patch syntax error", patchType: types.MergePatchType, patch: `{"spec":`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the merge patch is not a valid JSON document: unexpected end of JSON input`}},
		{name: "merge patch null", patchType: types.MergePatchType, patch: `null`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the merge patch is not a valid JSON document: a merge patch must be a JSON object, got null`}},
		{name: "merge patch array", patchType: types.MergePatchType, patch: `[{"spec":{}}]`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `error decoding patch: a merge patch must be a JSON object, got an array`}},
		{name: "merge patch array on a custom resource", patchType: types.MergePatchType, current: widgetObject(), patch: `[{"spec":{}}]`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `error decoding patch: a merge patch must be a JSON object, got an array`}},
		{name: "merge patch that is a string", patchType: types.MergePatchType, patch: `"x"`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `error decoding patch: a merge patch must be a JSON object, got a string`}},
		{name: "merge patch with a wrongly typed value", patchType: types.MergePatchType, patch: `{"spec":{"template":{"spec":{"containers":"app"}}}}`,
			err: &errWant{422, metav1.StatusReasonInvalid, `Deployment.apps "web" is invalid: patch: Invalid value: the patched object is not a valid Deployment: cannot restore slice from string`}},
		{name: "merge patch without an object", patchType: types.MergePatchType, noCurrent: true, patch: `{}`,
			err: &errWant{404, metav1.StatusReasonNotFound, `the object does not exist: only an apply patch can create an object`}},

		// strategic merge patch
		{name: "strategic merge patch merges containers by name", patchType: types.StrategicMergePatchType,
			patch: `{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"envoy:1.31"}]}}}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, "nginx:1.25", "spec", "template", "spec", "containers", "0", "image")
				wantValue(t, got, "envoy:1.31", "spec", "template", "spec", "containers", "1", "image")
				wantValue(t, got, "exporter:0.9", "spec", "template", "spec", "containers", "2", "image")
			}},
		{name: "strategic merge patch deletes a list element", patchType: types.StrategicMergePatchType,
			patch: `{"spec":{"template":{"spec":{"containers":[{"name":"metrics","$patch":"delete"}]}}}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				if n := len(nested(t, got, "spec", "template", "spec", "containers").([]interface{})); n != 2 {
					t.Errorf("%d containers, want 2", n)
				}
			}},
		{name: "strategic merge patch with setElementOrder", patchType: types.StrategicMergePatchType,
			patch: `{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"metrics"},{"name":"app"},{"name":"sidecar"}]}}}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, "metrics", "spec", "template", "spec", "containers", "0", "name")
			}},
		{name: "strategic merge patch retainKeys (deployment strategy)", patchType: types.StrategicMergePatchType,
			current: func() *unstructured.Unstructured {
				u := currentDeployment(t)
				_ = unstructured.SetNestedMap(u.Object, map[string]interface{}{"type": "RollingUpdate", "rollingUpdate": map[string]interface{}{"maxSurge": int64(1)}}, "spec", "strategy")
				return u
			}(),
			patch: `{"spec":{"strategy":{"$retainKeys":["type"],"type":"Recreate"}}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, map[string]interface{}{"type": "Recreate"}, "spec", "strategy")
			}},
		{name: "strategic merge patch keeps unknown fields", patchType: types.StrategicMergePatchType, patch: `{"spec":{"futureField":[{"name":"x"}]}}`,
			check: func(t *testing.T, got *unstructured.Unstructured) {
				wantValue(t, got, []interface{}{map[string]interface{}{"name": "x"}}, "spec", "futureField")
			}},
		{name: "strategic merge patch on a custom resource", patchType: types.StrategicMergePatchType, current: widgetObject(), patch: `{"spec":{"size":4}}`,
			err: &errWant{415, metav1.StatusReasonUnsupportedMediaType, "the body of the request was in an unknown format - accepted media types include: " + crdPatchTypes}},
		{name: "strategic merge patch for a custom resource that does not exist", patchType: types.StrategicMergePatchType, noCurrent: true, opts: Options{Kind: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}}, patch: `{}`,
			err: &errWant{415, metav1.StatusReasonUnsupportedMediaType, "the body of the request was in an unknown format - accepted media types include: " + crdPatchTypes}},
		{name: "strategic merge patch without an object", patchType: types.StrategicMergePatchType, noCurrent: true, opts: Options{Kind: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}}, patch: `{}`,
			err: &errWant{404, metav1.StatusReasonNotFound, `the object does not exist: only an apply patch can create an object`}},
		{name: "strategic merge patch syntax error", patchType: types.StrategicMergePatchType, patch: `{"spec":{`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the strategic merge patch is not a valid JSON object: unexpected end of JSON input`}},
		{name: "strategic merge patch array", patchType: types.StrategicMergePatchType, patch: `[]`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the strategic merge patch is not a valid JSON object: json: cannot unmarshal array into Go value of type map[string]interface {}`}},
		{name: "strategic merge patch bad directive", patchType: types.StrategicMergePatchType, patch: `{"spec":{"$patch":"frob"}}`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the strategic merge patch does not fit the object's schema (a field has the wrong type or the patch has an unknown directive)`}},
		{name: "strategic merge patch retainKeys mismatch", patchType: types.StrategicMergePatchType, patch: `{"spec":{"strategy":{"$retainKeys":["type"],"rollingUpdate":{"maxSurge":1}}}}`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the strategic merge patch is malformed: invalid patch format of retainKeys`}},
		{name: "strategic merge patch list of lists", patchType: types.StrategicMergePatchType, patch: `{"spec":{"template":{"spec":{"imagePullSecrets":[["x"]]}}}}`,
			err: &errWant{422, metav1.StatusReasonInvalid, `Deployment.apps "web" is invalid: patch: Invalid value: the patched object is not a valid Deployment: cannot restore struct from: slice`}},
		{name: "strategic merge patch with mismatched list element types", patchType: types.StrategicMergePatchType, patch: `{"spec":{"template":{"spec":{"containers":[["app"]]}}}}`,
			err: &errWant{400, metav1.StatusReasonBadRequest, `the strategic merge patch does not fit the object's schema (a field has the wrong type or the patch has an unknown directive)`}},
		{name: "strategic merge patch with a wrongly typed value", patchType: types.StrategicMergePatchType, patch: `{"metadata":{"annotations":{"foo":["bar"]}}}`,
			err: &errWant{422, metav1.StatusReasonInvalid, `Deployment.apps "web" is invalid: patch: Invalid value: the patched object is not a valid Deployment: unrecognized type: string`}},

		// patch types
		{name: "unknown patch type", patchType: "application/json", patch: `{}`,
			err: &errWant{415, metav1.StatusReasonUnsupportedMediaType, "the body of the request was in an unknown format - accepted media types include: " + allPatchTypes}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			current := tt.current
			if current == nil && !tt.noCurrent {
				current = currentDeployment(t)
			}
			var before string
			if current != nil {
				before = jsonOf(t, current.Object)
			}
			got, err := Apply(tt.patchType, current, []byte(tt.patch), tt.opts)
			if current != nil && jsonOf(t, current.Object) != before {
				t.Errorf("Apply modified the current object")
			}
			if tt.err != nil {
				if err == nil {
					t.Fatalf("expected an error, got %s", jsonOf(t, got.Object))
				}
				testutil.WantStatusError(t, err, tt.err.code, tt.err.reason, tt.err.msg)
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			tt.check(t, got)
		})
	}
}

func wantValue(t *testing.T, u *unstructured.Unstructured, want interface{}, path ...string) {
	t.Helper()
	got, found := lookup(u.Object, path)
	if !found {
		t.Errorf("%s: absent, want %v", strings.Join(path, "."), want)
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", strings.Join(path, "."), got, want)
	}
}

func wantAbsent(t *testing.T, u *unstructured.Unstructured, path ...string) {
	t.Helper()
	if got, found := lookup(u.Object, path); found {
		t.Errorf("%s = %#v, want it absent", strings.Join(path, "."), got)
	}
}

// lookup walks maps by key and lists by decimal index.
func lookup(v interface{}, path []string) (interface{}, bool) {
	for _, p := range path {
		switch c := v.(type) {
		case map[string]interface{}:
			var ok bool
			if v, ok = c[p]; !ok {
				return nil, false
			}
		case []interface{}:
			var i int
			if _, err := fmt.Sscanf(p, "%d", &i); err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func TestTypeFor(t *testing.T) {
	for ct, want := range map[string]types.PatchType{
		"application/json-patch+json":                 types.JSONPatchType,
		"application/merge-patch+json; charset=utf-8": types.MergePatchType,
		"application/strategic-merge-patch+json":      types.StrategicMergePatchType,
		"application/apply-patch+yaml":                types.ApplyYAMLPatchType,
		"application/apply-patch+cbor":                types.ApplyCBORPatchType,
	} {
		got, err := TypeFor(ct)
		if err != nil || got != want {
			t.Errorf("TypeFor(%q) = %q, %v", ct, got, err)
		}
	}
	_, err := TypeFor("application/json")
	testutil.WantStatusError(t, err, 415, metav1.StatusReasonUnsupportedMediaType, "the body of the request was in an unknown format - accepted media types include: "+allPatchTypes)
}

func TestEffectiveFieldManager(t *testing.T) {
	for _, tc := range []struct{ fm, ua, want string }{
		{"kubectl-client-side-apply", "kubectl/v1.35.4 (linux/amd64) kubernetes/abc", "kubectl-client-side-apply"},
		{"", "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/abc/system:serviceaccount:kube-system:deployment-controller", "kube-controller-manager"},
		{"", "my\x00agent", "myagent"},
		{"", strings.Repeat("é", 100), strings.Repeat("é", 64)},
		{"", "", ""},
	} {
		if got := EffectiveFieldManager(tc.fm, tc.ua); got != tc.want {
			t.Errorf("EffectiveFieldManager(%q, %q) = %q, want %q", tc.fm, tc.ua, got, tc.want)
		}
	}
}

// A patch can copy any stored value into a field the proxy then complains
// about. The proxy's own errors name fields, never the values.
func TestApplyNeverEchoesStoredValues(t *testing.T) {
	const secretValue = "hunter2-do-not-echo"
	secret := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]interface{}{"name": "topsecret", "namespace": "default"},
		"data":     map[string]interface{}{"password": secretValue},
	}}
	ns := "default"
	opts := Options{Name: "topsecret", Namespace: &ns}
	patches := map[string]struct {
		patchType types.PatchType
		patch     string
	}{
		"copy data into kind":           {types.JSONPatchType, `[{"op":"copy","from":"/data","path":"/kind"}]`},
		"copy a value into kind":        {types.JSONPatchType, `[{"op":"copy","from":"/data/password","path":"/kind"}]`},
		"copy a value into apiVersion":  {types.JSONPatchType, `[{"op":"copy","from":"/data/password","path":"/apiVersion"}]`},
		"copy a value into the name":    {types.JSONPatchType, `[{"op":"copy","from":"/data/password","path":"/metadata/name"}]`},
		"copy a value into a namespace": {types.JSONPatchType, `[{"op":"copy","from":"/data/password","path":"/metadata/namespace"}]`},
		"strategic list into a map":     {types.StrategicMergePatchType, `{"data":[{"a":1}]}`},
		"strategic directive":           {types.StrategicMergePatchType, `{"data":{"$patch":"frob"}}`},
	}
	for name, tc := range patches {
		t.Run(name, func(t *testing.T) {
			_, err := Apply(tc.patchType, secret, []byte(tc.patch), opts)
			if err == nil {
				t.Fatalf("the patch was applied")
			}
			if strings.Contains(err.Error(), secretValue) || strings.Contains(err.Error(), "password") {
				t.Fatalf("the error echoes a stored value: %v", err)
			}
		})
	}
}

// kube-apiserver bounds what copy operations may add; a patch of doubling
// copies otherwise grows exponentially. The limit holds within a fixed
// memory budget.
func TestJSONPatchCopyAmplificationIsBounded(t *testing.T) {
	ops := []string{`{"op":"add","path":"/spec/x","value":"` + strings.Repeat("a", 1024) + `"}`}
	// Doubling: x becomes [x, x] with every step; 17 steps would be 128 MiB.
	for i := 0; i < 17; i++ {
		ops = append(ops, `{"op":"copy","from":"/spec/x","path":"/spec/y"}`,
			`{"op":"add","path":"/spec/x","value":[]}`,
			`{"op":"move","from":"/spec/y","path":"/spec/x/-"}`,
			`{"op":"copy","from":"/spec/x/0","path":"/spec/x/-"}`)
	}
	patch := "[" + strings.Join(ops, ",") + "]"
	var before, after runtime2.MemStats
	runtime2.GC()
	runtime2.ReadMemStats(&before)
	_, err := Apply(types.JSONPatchType, currentDeployment(t), []byte(patch), Options{})
	runtime2.ReadMemStats(&after)
	var status *apierrors.StatusError
	if !errors.As(err, &status) || status.ErrStatus.Code != 422 || !strings.Contains(status.ErrStatus.Message, fmt.Sprint(MaxJSONPatchCopyBytes)) {
		t.Fatalf("got %v, want kube-apiserver's 422 naming the copy limit", err)
	}
	const budget = 64 << 20
	if grew := after.TotalAlloc - before.TotalAlloc; grew > budget {
		t.Fatalf("applying the patch allocated %d MiB, over the %d MiB budget", grew>>20, budget>>20)
	}
}
