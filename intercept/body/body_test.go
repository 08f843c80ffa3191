package body

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/internal/testfixtures"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

var deploymentGVK = appsv1.SchemeGroupVersion.WithKind("Deployment")

// testDeployment is the shared Deployment fixture.
func testDeployment() *appsv1.Deployment { return testfixtures.Deployment() }

func jsonOf(t testing.TB, v interface{}) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func protobufOf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := defaultCodec.protobuf.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// protobufEnvelope builds a protobuf body for an arbitrary kind, the way a
// client would if it sent a protobuf-encoded custom resource.
func protobufEnvelope(t testing.TB, apiVersion, kind string, raw []byte) []byte {
	t.Helper()
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: raw}
	b, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{0x6b, 0x38, 0x73, 0x00}, b...)
}

func cborOf(t testing.TB, u *unstructured.Unstructured) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := defaultCodec.cbor.Encode(u, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func widget() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata":   map[string]interface{}{"name": "w", "namespace": "default"},
		"spec":       map[string]interface{}{"size": int64(3), "ratio": 0.5, "tags": []interface{}{"a", "b"}},
	}}
}

const supported = "application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor"

func TestDecode(t *testing.T) {
	dep := testDeployment()
	depU := testutil.ToUnstructured(t, dep)
	depJSON := jsonOf(t, dep)
	depYAML, err := sigsyaml.Marshal(dep)
	if err != nil {
		t.Fatal(err)
	}
	depPB := protobufOf(t, dep)
	depCBOR := cborOf(t, depU)
	w := widget()

	noKind := depU.DeepCopy()
	delete(noKind.Object, "kind")
	delete(noKind.Object, "apiVersion")
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	oldVersion := depU.DeepCopy()
	oldVersion.SetAPIVersion("apps/v1beta2")

	hint := &deploymentGVK
	widgetGVK := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}

	type errCase struct {
		code   int32
		reason metav1.StatusReason
		msg    string
	}
	tests := []struct {
		name        string
		contentType string
		data        []byte
		hint        *schema.GroupVersionKind
		want        *unstructured.Unstructured
		wantFormat  Format
		err         *errCase
	}{
		{name: "json", contentType: "application/json", data: depJSON, hint: hint, want: depU, wantFormat: JSON},
		{name: "json with charset", contentType: "application/json; charset=utf-8", data: depJSON, hint: hint, want: depU, wantFormat: JSON},
		{name: "json media type is case-insensitive", contentType: "Application/JSON", data: depJSON, hint: hint, want: depU, wantFormat: JSON},
		{name: "no content type means json", contentType: "", data: depJSON, hint: hint, want: depU, wantFormat: JSON},
		{name: "json without hint", contentType: "application/json", data: depJSON, want: depU, wantFormat: JSON},
		{name: "json custom resource", contentType: "application/json", data: jsonOf(t, w.Object), hint: &widgetGVK, want: w, wantFormat: JSON},
		{name: "json kind and apiVersion defaulted from hint", contentType: "application/json", data: jsonOf(t, noKind.Object), hint: hint, want: depU, wantFormat: JSON},
		{name: "yaml", contentType: "application/yaml", data: depYAML, hint: hint, want: depU, wantFormat: YAML},
		{name: "yaml with charset and document markers", contentType: "application/yaml;charset=utf-8", data: append(append([]byte("# leading comment\n---\n"), depYAML...), []byte("---\n# trailing\n")...), hint: hint, want: depU, wantFormat: YAML},
		{name: "yaml custom resource", contentType: "application/yaml", data: []byte("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: default\nspec:\n  size: 3\n  ratio: 0.5\n  tags: [a, b]\n"), hint: &widgetGVK, want: w, wantFormat: YAML},
		{name: "protobuf", contentType: "application/vnd.kubernetes.protobuf", data: depPB, hint: hint, want: depU, wantFormat: Protobuf},
		{name: "protobuf without hint", contentType: "application/vnd.kubernetes.protobuf", data: depPB, want: depU, wantFormat: Protobuf},
		{name: "cbor", contentType: "application/cbor", data: depCBOR, hint: hint, want: depU, wantFormat: CBOR},
		{name: "cbor custom resource", contentType: "application/cbor", data: cborOf(t, w), hint: &widgetGVK, want: w, wantFormat: CBOR},

		// 415
		{name: "unknown content type", contentType: "text/plain", data: depJSON, hint: hint, wantFormat: "",
			err: &errCase{415, metav1.StatusReasonUnsupportedMediaType, `the body of the request was in an unknown format (Content-Type "text/plain") - accepted media types include: ` + supported}},
		{name: "x-yaml is not accepted by kube-apiserver either", contentType: "application/x-yaml", data: depYAML, hint: hint,
			err: &errCase{415, metav1.StatusReasonUnsupportedMediaType, `the body of the request was in an unknown format (Content-Type "application/x-yaml") - accepted media types include: ` + supported}},
		{name: "patch content type is not a body format", contentType: "application/merge-patch+json", data: depJSON, hint: hint,
			err: &errCase{415, metav1.StatusReasonUnsupportedMediaType, `the body of the request was in an unknown format (Content-Type "application/merge-patch+json") - accepted media types include: ` + supported}},
		{name: "unparseable content type", contentType: "application/json; charset", data: depJSON, hint: hint,
			err: &errCase{415, metav1.StatusReasonUnsupportedMediaType, `the Content-Type "application/json; charset" of the request body could not be parsed (mime: invalid media parameter) - accepted media types include: ` + supported}},
		{name: "protobuf custom resource", contentType: "application/vnd.kubernetes.protobuf", data: protobufEnvelope(t, "example.com/v1", "Widget", []byte{0x0a, 0x00}), hint: &widgetGVK, wantFormat: Protobuf,
			err: &errCase{415, metav1.StatusReasonUnsupportedMediaType, "protobuf request bodies are only supported for built-in Kubernetes types, and example.com/v1 Widget is not one (custom resources have no protobuf encoding): send it as application/json, application/yaml or application/cbor"}},

		// 400: annotations kube-apiserver cannot decode, which an edit of
		// the annotations would drop
		{name: "json annotation value null, which kube-apiserver reads as empty", contentType: "application/json", hint: hint, wantFormat: JSON,
			data: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","annotations":{"a":null}}}`),
			want: &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment",
				"metadata": map[string]interface{}{"name": "d", "annotations": map[string]interface{}{"a": nil}}}}},
		{name: "json annotation value a number", contentType: "application/json", hint: hint, wantFormat: JSON,
			data: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","annotations":{"team":"a","prometheus.io/port":8080}}}`),
			err:  &errCase{400, metav1.StatusReasonBadRequest, `Deployment in version "v1" cannot be handled as a Deployment: metadata.annotations["prometheus.io/port"] is a number, not a string; annotation values are strings (in YAML, quote numbers and booleans)`}},
		{name: "yaml annotation value a boolean", contentType: "application/yaml", hint: hint, wantFormat: YAML,
			data: []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  annotations:\n    enabled: true\n"),
			err:  &errCase{400, metav1.StatusReasonBadRequest, `Deployment in version "v1" cannot be handled as a Deployment: metadata.annotations["enabled"] is a boolean, not a string; annotation values are strings (in YAML, quote numbers and booleans)`}},
		{name: "json annotations a list", contentType: "application/json", hint: hint, wantFormat: JSON,
			data: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","annotations":["team=a"]}}`),
			err:  &errCase{400, metav1.StatusReasonBadRequest, `Deployment in version "v1" cannot be handled as a Deployment: metadata.annotations is an array, not an object; annotation values are strings (in YAML, quote numbers and booleans)`}},
		{name: "json namespace a number", contentType: "application/json", hint: hint, wantFormat: JSON,
			data: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":5}}`),
			err:  &errCase{400, metav1.StatusReasonBadRequest, `Deployment in version "v1" cannot be handled as a Deployment: metadata.namespace is a number, not a string (in YAML, quote it)`}},
		{name: "json namespace null, which kube-apiserver reads as empty", contentType: "application/json", hint: hint, wantFormat: JSON,
			data: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":null}}`),
			want: &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment",
				"metadata": map[string]interface{}{"name": "d", "namespace": nil}}}},
		{name: "cbor annotation value an object", contentType: "application/cbor", hint: hint, wantFormat: CBOR,
			data: cborOf(t, &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment",
				"metadata": map[string]interface{}{"name": "d", "annotations": map[string]interface{}{"x": map[string]interface{}{}}}}}),
			err: &errCase{400, metav1.StatusReasonBadRequest, `Deployment in version "v1" cannot be handled as a Deployment: metadata.annotations["x"] is an object, not a string; annotation values are strings (in YAML, quote numbers and booleans)`}},

		// 400: empty bodies
		{name: "json empty", contentType: "application/json", data: nil, hint: hint, wantFormat: JSON,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is empty: expected a Deployment object in JSON"}},
		{name: "yaml whitespace only", contentType: "application/yaml", data: []byte(" \n\t\n"), hint: hint, wantFormat: YAML,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is empty: expected a Deployment object in YAML"}},
		{name: "protobuf empty", contentType: "application/vnd.kubernetes.protobuf", data: []byte{}, wantFormat: Protobuf,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is empty: expected an object in protobuf"}},
		{name: "cbor empty", contentType: "application/cbor", data: nil, hint: hint, wantFormat: CBOR,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is empty: expected a Deployment object in CBOR"}},

		// 400: undecodable
		{name: "json syntax error", contentType: "application/json", data: []byte(`{"apiVersion":"apps/v1",}`), hint: hint, wantFormat: JSON,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is not valid JSON: invalid character '}' looking for beginning of object key string"}},
		{name: "json trailing garbage", contentType: "application/json", data: append(append([]byte{}, depJSON...), []byte(" {}")...), hint: hint, wantFormat: JSON,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is not valid JSON: invalid character '{' after top-level value"}},
		// kube-apiserver merges repeated members into a built-in kind's
		// Go type; the proxy would read the last alone.
		{name: "json member repeated at the top", contentType: "application/json", hint: hint, wantFormat: JSON,
			data: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"paused":true},"spec":{"replicas":1}}`),
			err: &errCase{400, metav1.StatusReasonBadRequest, `the request body has a member twice in one object (duplicate field "spec"): ` +
				`kube-apiserver merges the two for a built-in kind, where kausality-proxy reads the last, so what would be stored cannot be decided; send each member once`}},
		{name: "json members repeated deep, in a list and more than three", contentType: "application/json", hint: hint, wantFormat: JSON,
			data: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","name":"e"},"spec":{"template":{"spec":{"containers":[{"name":"a","image":"x","image":"y"}]}},"replicas":1,"replicas":2},"status":{},"status":{}}`),
			err: &errCase{400, metav1.StatusReasonBadRequest, `the request body has a member twice in one object (duplicate field "metadata.name", duplicate field "spec.template.spec.containers[0].image", duplicate field "spec.replicas" and 1 more): ` +
				`kube-apiserver merges the two for a built-in kind, where kausality-proxy reads the last, so what would be stored cannot be decided; send each member once`}},
		{name: "json array", contentType: "application/json", data: []byte(`[{"kind":"Deployment"}]`), hint: hint, wantFormat: JSON,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the JSON request body must be an object (a map with apiVersion, kind, metadata, ...), got an array"}},
		{name: "json null", contentType: "application/json", data: []byte(`null`), hint: hint, wantFormat: JSON,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the JSON request body must be an object (a map with apiVersion, kind, metadata, ...), got null"}},
		{name: "yaml syntax error", contentType: "application/yaml", data: []byte("kind: [Deployment\n"), hint: hint, wantFormat: YAML,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is not valid YAML: yaml: line 1: did not find expected ',' or ']'"}},
		{name: "yaml multi-document", contentType: "application/yaml", data: append(append(append([]byte{}, depYAML...), []byte("---\n")...), depYAML...), hint: hint, wantFormat: YAML,
			err: &errCase{400, metav1.StatusReasonBadRequest, `the YAML request body contains 2 documents separated by "---": send exactly one object per request`}},
		{name: "yaml only comments", contentType: "application/yaml", data: []byte("# nothing\n---\n# here\n"), hint: hint, wantFormat: YAML,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the YAML request body contains no object (only empty documents or comments)"}},
		{name: "yaml scalar", contentType: "application/yaml", data: []byte("just a string\n"), hint: hint, wantFormat: YAML,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the YAML request body must be an object (a map with apiVersion, kind, metadata, ...), got a string"}},
		{name: "protobuf sent as json bytes", contentType: "application/vnd.kubernetes.protobuf", data: depJSON, hint: hint, wantFormat: Protobuf,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is not a valid Kubernetes protobuf message: provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"}},
		{name: "protobuf truncated", contentType: "application/vnd.kubernetes.protobuf", data: depPB[:len(depPB)/2], hint: hint, wantFormat: Protobuf,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is not a valid Kubernetes protobuf message: unexpected EOF"}},
		{name: "protobuf magic only", contentType: "application/vnd.kubernetes.protobuf", data: []byte{0x6b, 0x38, 0x73, 0x00}, hint: hint, wantFormat: Protobuf,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is not a valid Kubernetes protobuf message: empty body"}},
		{name: "cbor garbage", contentType: "application/cbor", data: []byte{0xd9, 0xd9, 0xf7, 0xa1, 0x61}, hint: hint, wantFormat: CBOR,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is not valid CBOR: unexpected EOF"}},
		{name: "cbor sent as json bytes", contentType: "application/cbor", data: depJSON, hint: hint, wantFormat: CBOR,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the request body is not valid CBOR: unexpected EOF (the body also lacks the self-described CBOR tag 0xd9d9f7 that Kubernetes clients put first; is it really CBOR?)"}},

		// 400: wrong or missing kind
		{name: "json wrong kind", contentType: "application/json", data: jsonOf(t, pod), hint: hint, wantFormat: JSON,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the object in the request body is a Pod, but this resource expects a Deployment"}},
		{name: "protobuf wrong kind", contentType: "application/vnd.kubernetes.protobuf", data: protobufOf(t, pod), hint: hint, wantFormat: Protobuf,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the object in the request body is a Pod, but this resource expects a Deployment"}},
		{name: "cbor wrong kind", contentType: "application/cbor", data: cborOf(t, testutil.ToUnstructured(t, pod)), hint: hint, wantFormat: CBOR,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the object in the request body is a Pod, but this resource expects a Deployment"}},
		{name: "yaml wrong version", contentType: "application/yaml", data: jsonOf(t, oldVersion.Object), hint: hint, wantFormat: YAML,
			err: &errCase{400, metav1.StatusReasonBadRequest, "the API version in the data (apps/v1beta2) does not match the expected API version (apps/v1)"}},
		{name: "json missing kind without hint", contentType: "application/json", data: jsonOf(t, noKind.Object), wantFormat: JSON,
			err: &errCase{400, metav1.StatusReasonBadRequest, `the JSON request body has no "kind" (a string field naming the object's type, e.g. "Deployment")`}},
		{name: "cbor missing apiVersion", contentType: "application/cbor", data: cborOf(t, &unstructured.Unstructured{Object: map[string]interface{}{"kind": "Widget"}}), wantFormat: CBOR,
			err: &errCase{400, metav1.StatusReasonBadRequest, `the CBOR request body has no "apiVersion" (a string field such as "apps/v1")`}},
		{name: "json invalid apiVersion", contentType: "application/json", data: []byte(`{"apiVersion":"a/b/c","kind":"Deployment"}`), wantFormat: JSON,
			err: &errCase{400, metav1.StatusReasonBadRequest, `the JSON request body has an invalid apiVersion "a/b/c": unexpected GroupVersion string: a/b/c`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, format, err := Decode(tt.contentType, tt.data, tt.hint)
			if tt.err != nil {
				if err == nil {
					t.Fatalf("expected error, got object %v", got)
				}
				testutil.WantStatusError(t, err, tt.err.code, tt.err.reason, tt.err.msg)
				if format != tt.wantFormat {
					t.Errorf("format = %q, want %q", format, tt.wantFormat)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if format != tt.wantFormat {
				t.Errorf("format = %q, want %q", format, tt.wantFormat)
			}
			if !reflect.DeepEqual(got.Object, tt.want.Object) {
				t.Errorf("decoded object differs:\n got: %s\nwant: %s", jsonOf(t, got.Object), jsonOf(t, tt.want.Object))
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	dep := testutil.ToUnstructured(t, testDeployment())
	w := widget()
	for _, tt := range []struct {
		obj         *unstructured.Unstructured
		format      Format
		contentType string
	}{
		{dep, JSON, "application/json"},
		{dep, YAML, "application/yaml"},
		{dep, Protobuf, "application/vnd.kubernetes.protobuf"},
		{dep, CBOR, "application/cbor"},
		{w, JSON, "application/json"},
		{w, YAML, "application/yaml"},
		{w, CBOR, "application/cbor"},
	} {
		t.Run(string(tt.format)+"/"+tt.obj.GetKind(), func(t *testing.T) {
			obj := tt.obj.DeepCopy()
			obj.SetAnnotations(map[string]string{"kausality.io/trace": `[{"kind":"App"}]`})
			data, ct, err := Encode(obj, tt.format)
			if err != nil {
				t.Fatal(err)
			}
			if ct != tt.contentType || tt.format.ContentType() != ct {
				t.Errorf("content type %q, want %q", ct, tt.contentType)
			}
			gvk := obj.GroupVersionKind()
			got, format, err := Decode(ct, data, &gvk)
			if err != nil {
				t.Fatal(err)
			}
			if format != tt.format {
				t.Errorf("format %q, want %q", format, tt.format)
			}
			if !reflect.DeepEqual(got.Object, obj.Object) {
				t.Errorf("round trip differs:\n got: %s\nwant: %s", jsonOf(t, got.Object), jsonOf(t, obj.Object))
			}
		})
	}
}

func TestEncodeProtobufMatchesClientGo(t *testing.T) {
	// What we re-encode must be byte-identical to what a client-go client
	// would have sent for the same typed object.
	dep := testDeployment()
	want := protobufOf(t, dep)
	got, _, err := Encode(testutil.ToUnstructured(t, dep), Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("protobuf encoding differs from client-go's (%d vs %d bytes)", len(got), len(want))
	}
}

func TestEncodeErrors(t *testing.T) {
	_, _, err := Encode(widget(), Protobuf)
	testutil.WantStatusError(t, err, 415, metav1.StatusReasonUnsupportedMediaType, "cannot encode example.com/v1 Widget as protobuf: the type is not a built-in Kubernetes type")

	bad := testutil.ToUnstructured(t, testDeployment())
	if err := unstructured.SetNestedField(bad.Object, "three", "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	_, _, err = Encode(bad, Protobuf)
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code != http.StatusInternalServerError ||
		!strings.HasPrefix(se.ErrStatus.Message, "Internal error occurred: failed to convert apps/v1 Deployment to its typed form for protobuf: ") {
		t.Errorf("got %v", err)
	}

	_, _, err = Encode(widget(), Format("xml"))
	testutil.WantStatusError(t, err, 500, metav1.StatusReasonInternalError, `Internal error occurred: unknown body format "xml"`)
}

func TestCustomScheme(t *testing.T) {
	// A Codec over an empty scheme knows no protobuf types.
	c := NewCodec(runtime.NewScheme())
	_, _, err := c.Decode(ContentTypeProtobuf, protobufOf(t, testDeployment()), &deploymentGVK)
	testutil.WantStatusError(t, err, 415, metav1.StatusReasonUnsupportedMediaType, "protobuf request bodies are only supported for built-in Kubernetes types, and apps/v1 Deployment is not one (custom resources have no protobuf encoding): send it as application/json, application/yaml or application/cbor")
	if _, _, err := c.Decode(ContentTypeJSON, jsonOf(t, testDeployment()), &deploymentGVK); err != nil {
		t.Errorf("JSON must not need the scheme: %v", err)
	}
	_ = scheme.Scheme
}

func TestFormatFor(t *testing.T) {
	for ct, want := range map[string]Format{
		"":                                    JSON,
		"application/json":                    JSON,
		"application/json;charset=utf-8":      JSON,
		"application/yaml":                    YAML,
		"application/vnd.kubernetes.protobuf": Protobuf,
		"application/cbor":                    CBOR,
	} {
		got, err := FormatFor(ct)
		if err != nil || got != want {
			t.Errorf("FormatFor(%q) = %q, %v; want %q", ct, got, err, want)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	dep := testDeployment()
	depU := testutil.ToUnstructured(b, dep)
	depYAML, _ := sigsyaml.Marshal(dep)
	bodies := []struct {
		name, contentType string
		data              []byte
	}{
		{"JSON", ContentTypeJSON, jsonOf(b, dep)},
		{"YAML", ContentTypeYAML, depYAML},
		{"Protobuf", ContentTypeProtobuf, protobufOf(b, dep)},
		{"CBOR", ContentTypeCBOR, cborOf(b, depU)},
	}
	for _, body := range bodies {
		b.Run(body.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body.data)))
			for b.Loop() {
				if _, _, err := Decode(body.contentType, body.data, &deploymentGVK); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	depU := testutil.ToUnstructured(b, testDeployment())
	for _, f := range []Format{JSON, YAML, Protobuf, CBOR} {
		b.Run(string(f), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Encode(depU, f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// An endpoint of one kind takes it in any version of its group, and
// defaults what the body leaves out.
func TestDecodeOfKind(t *testing.T) {
	def := schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}
	cases := []struct {
		name, contentType, body string
		wantAPIVersion          string
		wantCode                int32
	}{
		{"policy/v1", ContentTypeJSON, `{"apiVersion":"policy/v1","kind":"Eviction"}`, "policy/v1", 0},
		{"policy/v1beta1", ContentTypeYAML, "apiVersion: policy/v1beta1\nkind: Eviction\n", "policy/v1beta1", 0},
		{"no apiVersion nor kind: def's", ContentTypeYAML, "metadata:\n  name: p\n", "policy/v1", 0},
		{"another group", ContentTypeJSON, `{"apiVersion":"v1","kind":"Eviction"}`, "", http.StatusBadRequest},
		{"another kind", ContentTypeJSON, `{"apiVersion":"policy/v1","kind":"PodDisruptionBudget"}`, "", http.StatusBadRequest},
		{"not JSON", ContentTypeJSON, `{`, "", http.StatusBadRequest},
		{"an unknown format", "text/plain", `kind: Eviction`, "", http.StatusUnsupportedMediaType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj, _, err := DecodeOfKind(tc.contentType, []byte(tc.body), def)
			if tc.wantCode != 0 {
				var status apierrors.APIStatus
				if !errors.As(err, &status) || status.Status().Code != tc.wantCode {
					t.Fatalf("error %v, want %d", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if obj.GetAPIVersion() != tc.wantAPIVersion || obj.GetKind() != "Eviction" {
				t.Fatalf("decoded %s %s, want %s Eviction", obj.GetAPIVersion(), obj.GetKind(), tc.wantAPIVersion)
			}
		})
	}
}
