// Package body decodes and re-encodes the request bodies of intercepted
// writes (create and update bodies, i.e. whole objects) in every format
// kube-apiserver accepts: JSON, YAML, protobuf and CBOR.
//
// Decoding always yields an *unstructured.Unstructured so that the rest of
// the proxy works on one representation. Protobuf, which only exists for
// built-in types, is decoded into the typed Go struct registered in a
// runtime.Scheme (by default client-go's kubernetes scheme) and then converted
// to unstructured; Encode goes the opposite way.
//
// Every error returned by this package is an *apierrors.StatusError carrying
// the HTTP code the proxy should answer with (400 or 415), so the caller
// can write it out as a metav1.Status without further mapping.
//
// The package does no I/O besides reading the body it is handed.
package body

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http" //nolint:depguard // status codes only: its errors are metav1.Status values with the HTTP code
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	cborserializer "k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme" //nolint:depguard // the codec of the built-in kinds, not a client
	sigsyaml "sigs.k8s.io/yaml"
)

// Format is the wire format of a request body.
type Format string

// The formats a body can have.
const (
	JSON     Format = "JSON"
	YAML     Format = "YAML"
	Protobuf Format = "protobuf"
	CBOR     Format = "CBOR"
)

// Media types, as kube-apiserver spells them.
const (
	ContentTypeJSON     = runtime.ContentTypeJSON     // application/json
	ContentTypeYAML     = runtime.ContentTypeYAML     // application/yaml
	ContentTypeProtobuf = runtime.ContentTypeProtobuf // application/vnd.kubernetes.protobuf
	ContentTypeCBOR     = runtime.ContentTypeCBOR     // application/cbor
)

// SupportedContentTypes lists the media types Decode accepts, in the order
// kube-apiserver lists them in its own 415 responses.
var SupportedContentTypes = []string{ContentTypeJSON, ContentTypeYAML, ContentTypeProtobuf, ContentTypeCBOR}

// ContentType returns the media type of the format ("" for an unknown format).
func (f Format) ContentType() string {
	switch f {
	case JSON:
		return ContentTypeJSON
	case YAML:
		return ContentTypeYAML
	case Protobuf:
		return ContentTypeProtobuf
	case CBOR:
		return ContentTypeCBOR
	}
	return ""
}

// FormatFor maps a Content-Type header value to a Format. Parameters such as
// charset are ignored. An empty Content-Type means JSON, as in kube-apiserver
// (it picks its first supported media type). Anything else is a 415.
func FormatFor(contentType string) (Format, error) {
	if strings.TrimSpace(contentType) == "" {
		return JSON, nil
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", unsupportedMediaType(fmt.Sprintf("the Content-Type %q of the request body could not be parsed (%v) - accepted media types include: %s",
			contentType, err, strings.Join(SupportedContentTypes, ", ")))
	}
	switch mediaType {
	case ContentTypeJSON:
		return JSON, nil
	case ContentTypeYAML:
		return YAML, nil
	case ContentTypeProtobuf:
		return Protobuf, nil
	case ContentTypeCBOR:
		return CBOR, nil
	}
	return "", unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format (Content-Type %q) - accepted media types include: %s",
		mediaType, strings.Join(SupportedContentTypes, ", ")))
}

// Codec decodes and encodes request bodies. Its Scheme supplies the typed
// objects for protobuf; JSON, YAML and CBOR never need it.
type Codec struct {
	scheme   *runtime.Scheme
	protobuf *protobuf.Serializer
	cbor     runtime.Serializer
}

// NewCodec returns a Codec whose protobuf support covers the types registered
// in s (client-go's scheme.Scheme covers every built-in type).
func NewCodec(s *runtime.Scheme) *Codec {
	return &Codec{
		scheme:   s,
		protobuf: protobuf.NewSerializer(s, s),
		cbor:     cborserializer.NewSerializer(s, s),
	}
}

var defaultCodec = NewCodec(scheme.Scheme)

// Decode decodes a whole-object request body (create or update) of the given
// Content-Type; see Codec.Decode.
func Decode(contentType string, data []byte, hint *schema.GroupVersionKind) (*unstructured.Unstructured, Format, error) {
	return defaultCodec.Decode(contentType, data, hint)
}

// Encode re-encodes obj; see Codec.Encode.
func Encode(obj *unstructured.Unstructured, format Format) ([]byte, string, error) {
	return defaultCodec.Encode(obj, format)
}

// WithProtobufMetadata re-encodes a protobuf body; see
// Codec.WithProtobufMetadata.
func WithProtobufMetadata(data []byte, hint *schema.GroupVersionKind, change func(metav1.Object)) ([]byte, error) {
	return defaultCodec.WithProtobufMetadata(data, hint, change)
}

// WithProtobufMetadata is the protobuf body data, which Decode decoded
// with hint, with change made to its object's metadata. The typed object
// the body holds is decoded again and changed, not the unstructured object
// Decode made of it: converting that back to its type costs several times
// as much as the decoding, and only the metadata changes.
func (c *Codec) WithProtobufMetadata(data []byte, hint *schema.GroupVersionKind, change func(metav1.Object)) ([]byte, error) {
	typed, gvk, err := c.protobuf.Decode(data, hint, nil)
	if err != nil {
		return nil, internalf("decoding the protobuf request body again: %v", err)
	}
	m, err := meta.Accessor(typed)
	if err != nil {
		return nil, internalf("the protobuf %s in the request body has no metadata: %v", gvkString(*gvk), err)
	}
	change(m)
	typed.GetObjectKind().SetGroupVersionKind(*gvk)
	var buf bytes.Buffer
	if err := c.protobuf.Encode(typed, &buf); err != nil {
		return nil, internalf("failed to encode %s as protobuf: %v", gvkString(*gvk), err)
	}
	return buf.Bytes(), nil
}

// Decode decodes a whole-object request body (create or update) of the given
// Content-Type into an unstructured object.
//
// hint is the kind the request path calls for (may be nil, and each empty
// field is a wildcard). As in kube-apiserver, a body that omits kind or
// apiVersion gets them from the hint; a body whose kind, group or version
// contradicts the hint is a 400. Without a hint, a body lacking kind or
// apiVersion is a 400.
//
// Errors: 415 for an unknown Content-Type and for protobuf bodies of types
// outside the scheme; 400 for an empty or undecodable body, a YAML stream with
// more than one document, a body that is not an object, or the wrong kind.
func (c *Codec) Decode(contentType string, data []byte, hint *schema.GroupVersionKind) (*unstructured.Unstructured, Format, error) {
	format, err := FormatFor(contentType)
	if err != nil {
		return nil, "", err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, format, apierrors.NewBadRequest(fmt.Sprintf("the request body is empty: expected %s in %s", expected(hint), format))
	}

	var obj *unstructured.Unstructured
	switch format {
	case JSON:
		obj, err = decodeJSON(data)
	case YAML:
		obj, err = decodeYAML(data)
	case CBOR:
		obj, err = decodeCBOR(data)
	case Protobuf:
		obj, err = c.decodeProtobuf(data, hint)
	}
	if err != nil {
		return nil, format, err
	}
	if err := checkKind(obj, hint, format); err != nil {
		return nil, format, err
	}
	if format != Protobuf {
		if err := checkMetadata(obj); err != nil {
			return nil, format, err
		}
	}
	return obj, format, nil
}

// checkMetadata refuses, as kube-apiserver does, an object whose
// metadata.annotations is not a map of strings (null values aside, which
// kube-apiserver reads as ""), or whose name, namespace, resourceVersion
// or uid is not a string. The proxy reads and edits these, and an
// unstructured object reads a malformed one as absent: the caller's
// annotations would be dropped, or its namespace or precondition replaced,
// and kube-apiserver would accept a write it refuses. DeleteOptions have
// no metadata: kube-apiserver ignores the member.
func checkMetadata(obj *unstructured.Unstructured) error {
	metadata, ok := obj.Object["metadata"].(map[string]interface{})
	gvk := obj.GroupVersionKind()
	if !ok || gvk.Kind == "DeleteOptions" {
		return nil
	}
	refuse := func(what, hint string) error {
		return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %s%s", gvk.Kind, gvk.Version, gvk.Kind, what, hint))
	}
	for _, field := range []string{"name", "generateName", "namespace", "resourceVersion", "uid"} {
		if v, set := metadata[field]; set && v != nil {
			if _, isString := v.(string); !isString {
				return refuse(fmt.Sprintf("metadata.%s is %s, not a string", field, Describe(v)), " (in YAML, quote it)")
			}
		}
	}
	const annotationsHint = "; annotation values are strings (in YAML, quote numbers and booleans)"
	ann := metadata["annotations"]
	if ann == nil {
		return nil
	}
	m, ok := ann.(map[string]interface{})
	if !ok {
		return refuse("metadata.annotations is "+Describe(ann)+", not an object", annotationsHint)
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if _, isString := v.(string); !isString && v != nil {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	return refuse(fmt.Sprintf("metadata.annotations[%q] is %s, not a string", keys[0], Describe(m[keys[0]])), annotationsHint)
}

// DecodeOfKind decodes the body of an endpoint that takes one kind in any
// version of its group (pods/eviction takes an Eviction of policy/v1 or
// policy/v1beta1), of the given Content-Type, into an unstructured object.
// A body that omits kind or apiVersion gets def's, as kube-apiserver
// defaults them; one of another group or kind is a 400. Errors are those
// of Decode.
func (c *Codec) DecodeOfKind(contentType string, data []byte, def schema.GroupVersionKind) (*unstructured.Unstructured, Format, error) {
	obj, format, err := c.Decode(contentType, data, &schema.GroupVersionKind{Group: def.Group, Kind: def.Kind})
	var status apierrors.APIStatus
	if err == nil || format == Protobuf || !errors.As(err, &status) || status.Status().Code != http.StatusBadRequest {
		return obj, format, err
	}
	// A body without apiVersion, which a hint without a version cannot
	// fill: decoded again with def's.
	return c.Decode(contentType, data, &def)
}

// DecodeOfKind decodes with the default Codec; see Codec.DecodeOfKind.
func DecodeOfKind(contentType string, data []byte, def schema.GroupVersionKind) (*unstructured.Unstructured, Format, error) {
	return defaultCodec.DecodeOfKind(contentType, data, def)
}

func expected(hint *schema.GroupVersionKind) string {
	if hint == nil || hint.Kind == "" {
		return "an object"
	}
	return "a " + hint.Kind + " object"
}

func decodeJSON(data []byte) (*unstructured.Unstructured, error) {
	var v interface{}
	syntaxErr, repeated := unmarshalJSONOnce(data, &v)
	if syntaxErr != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid JSON: %v", syntaxErr))
	}
	if repeated != nil {
		return nil, repeated
	}
	return asObject(v, JSON)
}

func decodeYAML(data []byte) (*unstructured.Unstructured, error) {
	js, err := YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var v interface{}
	if err := utiljson.Unmarshal(js, &v); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid YAML: %v", err))
	}
	return asObject(v, YAML)
}

// YAMLToJSON converts a YAML request body (a create/update body or an apply
// patch) to JSON with sigs.k8s.io/yaml, the converter kube-apiserver uses.
// Unlike kube-apiserver, which silently keeps only the first document of a
// "---"-separated stream, it rejects streams with more than one non-empty
// document (400): should our split ever disagree with the apiserver's about
// which document counts, a write could hide a change from the proxy. Empty
// documents (only "---", whitespace or comments) are ignored; a body with no
// object at all is a 400 too.
func YAMLToJSON(data []byte) ([]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var doc []byte
	docs := 0
	for {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid YAML: %v", err))
		}
		js, err := sigsyaml.YAMLToJSON(raw)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid YAML: %v", err))
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue
		}
		docs++
		doc = js
	}
	switch {
	case docs == 0:
		return nil, apierrors.NewBadRequest("the YAML request body contains no object (only empty documents or comments)")
	case docs > 1:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the YAML request body contains %d documents separated by \"---\": send exactly one object per request", docs))
	}
	return doc, nil
}

func decodeCBOR(data []byte) (*unstructured.Unstructured, error) {
	var v interface{}
	// direct.Unmarshal uses the same decoding mode as apimachinery's CBOR
	// serializer (it also accepts the self-described CBOR tag 55799).
	if err := cbor.Unmarshal(data, &v); err != nil {
		hint := ""
		if !bytes.HasPrefix(data, selfDescribedCBOR) {
			hint = " (the body also lacks the self-described CBOR tag 0xd9d9f7 that Kubernetes clients put first; is it really CBOR?)"
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid CBOR: %v%s", err, hint))
	}
	return asObject(v, CBOR)
}

// selfDescribedCBOR is the head of CBOR tag 55799, which apimachinery's CBOR
// encoder puts in front of every body.
var selfDescribedCBOR = []byte{0xd9, 0xd9, 0xf7}

func asObject(v interface{}, format Format) (*unstructured.Unstructured, error) {
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the %s request body must be an object (a map with apiVersion, kind, metadata, ...), got %s", format, Describe(v)))
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Describe names the JSON type of a decoded value for error messages
// ("an array", "a string", ...).
func Describe(v interface{}) string {
	switch v.(type) {
	case nil:
		return "null"
	case []interface{}:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, uint64, float64:
		return "a number"
	case map[string]interface{}:
		return "an object"
	}
	return fmt.Sprintf("a value of type %T", v)
}

func (c *Codec) decodeProtobuf(data []byte, hint *schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	typed, gvk, err := c.protobuf.Decode(data, hint, nil)
	if err != nil {
		if runtime.IsNotRegisteredError(err) && gvk != nil {
			return nil, unsupportedMediaType(fmt.Sprintf(
				"protobuf request bodies are only supported for built-in Kubernetes types, and %s is not one (custom resources have no protobuf encoding): send it as %s, %s or %s",
				gvkString(*gvk), ContentTypeJSON, ContentTypeYAML, ContentTypeCBOR))
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not a valid Kubernetes protobuf message: %v", err))
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the protobuf %s in the request body cannot be converted: %v", gvkString(*gvk), err))
	}
	obj := &unstructured.Unstructured{Object: content}
	obj.SetGroupVersionKind(*gvk)
	return obj, nil
}

// checkKind fills a missing kind/apiVersion from the hint (as kube-apiserver
// defaults them from the request path) and rejects contradictions.
func checkKind(obj *unstructured.Unstructured, hint *schema.GroupVersionKind, format Format) error {
	apiVersion, _ := obj.Object["apiVersion"].(string)
	kind, _ := obj.Object["kind"].(string)
	if hint != nil {
		if kind == "" && hint.Kind != "" {
			kind = hint.Kind
			obj.Object["kind"] = kind
		}
		if apiVersion == "" && hint.Version != "" {
			apiVersion = hint.GroupVersion().String()
			obj.Object["apiVersion"] = apiVersion
		}
	}
	if kind == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("the %s request body has no \"kind\" (a string field naming the object's type, e.g. \"Deployment\")", format))
	}
	if apiVersion == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("the %s request body has no \"apiVersion\" (a string field such as \"apps/v1\")", format))
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the %s request body has an invalid apiVersion %q: %v", format, apiVersion, err))
	}
	if hint == nil {
		return nil
	}
	if hint.Kind != "" && kind != hint.Kind {
		return apierrors.NewBadRequest(fmt.Sprintf("the object in the request body is a %s, but this resource expects a %s", kind, hint.Kind))
	}
	if (hint.Group != "" || hint.Version != "") && (gv.Group != hint.Group || (hint.Version != "" && gv.Version != hint.Version)) {
		// kube-apiserver's own wording (create/update handlers).
		return apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", gv.String(), hintGV(*hint)))
	}
	return nil
}

func hintGV(h schema.GroupVersionKind) string {
	if h.Version == "" {
		if h.Group == "" {
			return "core group"
		}
		return h.Group + "/*"
	}
	return h.GroupVersion().String()
}

func gvkString(gvk schema.GroupVersionKind) string {
	if gvk.Kind == "" {
		return "the object"
	}
	if gvk.Group == "" {
		return fmt.Sprintf("%s %s", gvk.Version, gvk.Kind)
	}
	return fmt.Sprintf("%s/%s %s", gvk.Group, gvk.Version, gvk.Kind)
}

// Encode encodes obj in format and returns the bytes and the Content-Type to
// send them with. Protobuf goes through the typed object registered in the
// Codec's scheme (so fields unknown to that type are dropped, as
// kube-apiserver would drop them). Errors are 500s: they mean an object the
// proxy built cannot be represented, not that the client erred.
func (c *Codec) Encode(obj *unstructured.Unstructured, format Format) ([]byte, string, error) {
	if obj == nil {
		return nil, "", apierrors.NewInternalError(errors.New("body.Encode: nil object"))
	}
	switch format {
	case JSON:
		b, err := json.Marshal(obj.Object)
		if err != nil {
			return nil, "", internalf("failed to encode the request body as JSON: %v", err)
		}
		return b, ContentTypeJSON, nil
	case YAML:
		b, err := sigsyaml.Marshal(obj.Object)
		if err != nil {
			return nil, "", internalf("failed to encode the request body as YAML: %v", err)
		}
		return b, ContentTypeYAML, nil
	case CBOR:
		var buf bytes.Buffer
		if err := c.cbor.Encode(obj, &buf); err != nil {
			return nil, "", internalf("failed to encode the request body as CBOR: %v", err)
		}
		return buf.Bytes(), ContentTypeCBOR, nil
	case Protobuf:
		gvk := obj.GroupVersionKind()
		typed, err := c.scheme.New(gvk)
		if err != nil {
			return nil, "", unsupportedMediaType(fmt.Sprintf("cannot encode %s as protobuf: the type is not a built-in Kubernetes type", gvkString(gvk)))
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, typed); err != nil {
			return nil, "", internalf("failed to convert %s to its typed form for protobuf: %v", gvkString(gvk), err)
		}
		typed.GetObjectKind().SetGroupVersionKind(gvk)
		var buf bytes.Buffer
		if err := c.protobuf.Encode(typed, &buf); err != nil {
			return nil, "", internalf("failed to encode %s as protobuf: %v", gvkString(gvk), err)
		}
		return buf.Bytes(), ContentTypeProtobuf, nil
	}
	return nil, "", internalf("unknown body format %q", string(format))
}

func unsupportedMediaType(msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: msg,
	}}
}

func internalf(format string, args ...interface{}) *apierrors.StatusError {
	return apierrors.NewInternalError(fmt.Errorf(format, args...))
}
