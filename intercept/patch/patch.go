// Package patch computes the effective new object of a PATCH request, the way
// kube-apiserver's patch handler (k8s.io/apiserver/pkg/endpoints/handlers/
// patch.go) would, and rewrites patches so that they also set annotations.
//
// All four patch types are supported:
//
//   - JSON patch (RFC 6902, application/json-patch+json) with
//     gopkg.in/evanphx/json-patch.v4, the library kube-apiserver v1.35 uses;
//   - JSON merge patch (RFC 7386, application/merge-patch+json), same library;
//   - strategic merge patch (application/strategic-merge-patch+json) with
//     k8s.io/apimachinery/pkg/util/strategicpatch and the typed struct from the
//     scheme (client-go's by default). Types outside the scheme, i.e. custom
//     resources, get 415 exactly like kube-apiserver answers for them;
//   - server-side apply (application/apply-patch+yaml, and
//     application/apply-patch+cbor which kube-apiserver v1.35 only accepts
//     with the alpha CBORServingAndStorage gate) through
//     k8s.io/apimachinery/pkg/util/managedfields' FieldManager, i.e. the same
//     structured-merge-diff code path kube-apiserver runs.
//
// Errors are *apierrors.StatusError values with the code kube-apiserver would
// answer with: 400 for an undecodable patch, 404 for a non-apply patch without
// a current object, 409 for apply conflicts, 413 for JSON patches with more
// than 10000 operations, 415 for unsupported patch types and 422 for patches
// that decode but cannot be applied or that produce an invalid object.
// Messages are more specific than kube-apiserver's where its own are generic
// (e.g. a failed JSON patch "test" is a 422 Invalid in both, but we say which
// operation failed).
//
// # Remaining gaps versus kube-apiserver
//
// The effective object is what the patch mechanism produces, before the
// apiserver's later stages. It therefore does not include:
//   - defaulting (the client-go scheme has no defaulting functions; pass
//     Options.Defaulter to run your own on server-side apply results),
//   - mutating admission, and status/metadata resets done by registry
//     strategies (e.g. a Deployment's status in an apply to the main
//     resource, the "resetFields" of the strategy),
//   - managedFields bookkeeping for non-apply patches, and
//   - dropping of fields the server's schema does not know: JSON, merge and
//     strategic merge patches keep unknown fields, so a patch that adds one can
//     show up as a change although the apiserver would drop it.
//
// For server-side apply, the result is computed by the real FieldManager from
// the current object's managedFields, so removal of fields that this manager
// applied before and no longer applies, conflicts (409, unless Force) and
// co-ownership all behave as in the apiserver, with two caveats:
//   - merge semantics depend on the TypeConverter. Without one, the deduced
//     converter treats every list and nested map as atomic, so e.g. applying a
//     Deployment that lists one container replaces the whole containers list,
//     while the apiserver would merge by container name; NewBuiltinTypeConverter
//     (client-go's embedded schema for built-in types) or a converter built
//     from the apiserver's OpenAPI with managedfields.NewTypeConverter removes
//     that gap. A live object with fields unknown to the converter's schema
//     (version skew) cannot be typed and yields a 500.
//   - managedFields entries recorded at another API version than the patch's
//     (e.g. an old extensions/v1beta1 entry on an apps/v1 Deployment) cannot be
//     converted and are ignored, so fields owned only through them neither
//     conflict nor get removed.
package patch

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http" //nolint:depguard // status codes only: its errors are metav1.Status values with the HTTP code
	"strings"
	"sync"
	"sync/atomic"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme" //nolint:depguard // the codec of the built-in kinds, not a client

	"github.com/kausality-io/kausality-proxy/intercept/body"
)

// MaxJSONPatchOperations is kube-apiserver's limit on the number of
// operations in one JSON patch (413 above it).
const MaxJSONPatchOperations = 10000

// MaxJSONPatchCopyBytes is kube-apiserver's default bound on the bytes a
// JSON patch may add through copy operations. Without it a patch of a few
// kilobytes that doubles a value with every copy costs gigabytes.
const MaxJSONPatchCopyBytes int64 = 3 * 1024 * 1024

// limitJSONPatchCopies sets the json-patch library's process-wide copy
// limit the way kube-apiserver does: lowered to MaxJSONPatchCopyBytes unless
// something already set a smaller one.
var limitJSONPatchCopies = sync.OnceFunc(func() {
	for {
		existing := atomic.LoadInt64(&jsonpatch.AccumulatedCopySizeLimit)
		if existing != 0 && existing <= MaxJSONPatchCopyBytes {
			return
		}
		if atomic.CompareAndSwapInt64(&jsonpatch.AccumulatedCopySizeLimit, existing, MaxJSONPatchCopyBytes) {
			return
		}
	}
})

// Options carries what the request adds to the patch body.
type Options struct {
	// FieldManager is the request's fieldManager query parameter. Apply
	// requires it (422 without, as in kube-apiserver); other patch types do
	// not use it.
	FieldManager string
	// Force is the force query parameter. It is only valid for apply (422
	// otherwise, as in kube-apiserver).
	Force *bool

	// TypeConverter gives server-side apply its schema. nil means
	// managedfields.NewDeducedTypeConverter(): every list and nested map is
	// atomic. See NewBuiltinTypeConverter.
	TypeConverter managedfields.TypeConverter
	// Defaulter, if set, defaults server-side apply results as the apiserver
	// does before storing them.
	Defaulter runtime.ObjectDefaulter
	// Scheme supplies typed structs for strategic merge patch and the type
	// checks of JSON and merge patch results. nil means client-go's
	// scheme.Scheme (all built-in types).
	Scheme *runtime.Scheme

	// SkipTypeCheck skips decoding JSON, merge and strategic merge patch
	// results into their typed struct, which catches wrongly typed values
	// (422, as in kube-apiserver) but costs about a third of the time of a
	// JSON or merge patch of a Deployment.
	SkipTypeCheck bool

	// Kind is the kind the request path addresses. Optional when current is
	// non-nil (its kind is used); for an apply that creates, it defaults to
	// the apply configuration's own apiVersion/kind. An apply configuration of
	// another kind is a 400, as in kube-apiserver.
	Kind schema.GroupVersionKind
	// Name is the object name from the request path. Optional: defaults to the
	// current object's name. A result with another name is a 400.
	Name string
	// Namespace is the namespace from the request path, "" for cluster-scoped
	// resources. nil means the current object's namespace. A result without a
	// namespace gets this one; a contradicting one is a 400 (cluster-scoped:
	// cleared), as in kube-apiserver.
	Namespace *string
}

func (o *Options) scheme() *runtime.Scheme {
	if o.Scheme != nil {
		return o.Scheme
	}
	return scheme.Scheme
}

// Patch types supported by kube-apiserver for built-in resources and for
// custom resources (with default feature gates), in the order it lists them.
var (
	BuiltinPatchTypes        = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType)}
	CustomResourcePatchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.ApplyYAMLPatchType)}
	// SupportedPatchTypes is what this package accepts.
	SupportedPatchTypes = append(append([]string{}, BuiltinPatchTypes...), string(types.ApplyCBORPatchType))
)

// TypeFor maps a PATCH request's Content-Type to a patch type, stripping
// parameters such as charset the way kube-apiserver does. Unknown types are a
// 415.
func TypeFor(contentType string) (types.PatchType, error) {
	if i := strings.Index(contentType, ";"); i >= 0 {
		contentType = contentType[:i]
	}
	pt := types.PatchType(strings.ToLower(strings.TrimSpace(contentType)))
	switch pt {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		return pt, nil
	}
	return "", unsupportedPatchType(SupportedPatchTypes)
}

// Apply computes the effective new object: patch applied to current. current
// is nil when the object does not exist; only apply can then create it (the
// result is the applied object, plus managedFields). current is not modified.
// The result of a merge patch shares the members the patch leaves alone with
// current (a copy of a large object costs more than the rest of the patch),
// so neither may be modified below its top level and its metadata.
func Apply(patchType types.PatchType, current *unstructured.Unstructured, patch []byte, opts Options) (*unstructured.Unstructured, error) {
	po := &metav1.PatchOptions{FieldManager: opts.FieldManager, Force: opts.Force}
	if errs := validation.ValidatePatchOptions(po, patchType); len(errs) > 0 {
		return nil, apierrors.NewInvalid(patchOptionsKind, "", errs)
	}

	var (
		result *unstructured.Unstructured
		err    error
	)
	switch patchType {
	case types.JSONPatchType, types.MergePatchType:
		if current == nil {
			return nil, notFound(opts)
		}
		result, err = applyJSON(patchType, current, patch, opts)
	case types.StrategicMergePatchType:
		result, err = applyStrategic(current, patch, opts)
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		result, err = applyServerSide(patchType, current, patch, opts)
	default:
		return nil, unsupportedPatchType(SupportedPatchTypes)
	}
	if err != nil {
		return nil, err
	}
	if err := checkNameAndNamespace(result, current, opts); err != nil {
		return nil, err
	}
	return result, nil
}

func applyJSON(patchType types.PatchType, current *unstructured.Unstructured, patch []byte, opts Options) (*unstructured.Unstructured, error) {
	if patchType == types.MergePatchType {
		return applyMerge(current, patch, opts)
	}
	currentJSON, err := json.Marshal(current.Object)
	if err != nil {
		return nil, internalError(fmt.Errorf("failed to encode the current object: %w", err))
	}
	var patched []byte
	switch patchType {
	case types.JSONPatchType:
		limitJSONPatchCopies()
		ops, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the JSON patch cannot be decoded: %v", err))
		}
		if len(ops) > MaxJSONPatchOperations {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
				"The allowed maximum operations in a JSON patch is %d, got %d", MaxJSONPatchOperations, len(ops)))
		}
		if patched, err = applyJSONPatchOps(ops, currentJSON); err != nil {
			// kube-apiserver: 422 Invalid, also when the copy limit is hit.
			// The library's errors name operations, paths and sizes, not
			// values.
			return nil, invalidPatch(current, "the JSON patch cannot be applied: "+err.Error())
		}
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(currentJSON, patch)
		if err != nil {
			if errors.Is(err, jsonpatch.ErrBadJSONPatch) {
				return nil, apierrors.NewBadRequest("the merge patch is not a valid JSON document: " + err.Error())
			}
			return nil, apierrors.NewBadRequest("the merge patch cannot be applied")
		}
	}
	var v interface{}
	if err := utiljson.Unmarshal(patched, &v); err != nil {
		return nil, invalidPatch(current, "the patched object is not valid JSON")
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, invalidPatch(current, fmt.Sprintf("the patch turns the object into %s", body.Describe(v)))
	}
	return checkResult(&unstructured.Unstructured{Object: m}, current, opts, opts.scheme())
}

func applyStrategic(current *unstructured.Unstructured, patch []byte, opts Options) (*unstructured.Unstructured, error) {
	gvk := opts.Kind
	if gvk.Empty() && current != nil {
		gvk = current.GroupVersionKind()
	}
	sch := opts.scheme()
	schemaObj, err := sch.New(gvk)
	if err != nil {
		if runtime.IsNotRegisteredError(err) {
			// Exactly what kube-apiserver answers for custom resources.
			return nil, unsupportedPatchType(CustomResourcePatchTypes)
		}
		return nil, internalError(err)
	}
	if current == nil {
		return nil, notFound(opts)
	}
	patchMap := map[string]interface{}{}
	if err := utiljson.Unmarshal(patch, &patchMap); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the strategic merge patch is not a valid JSON object: %v", err))
	}
	original := current.DeepCopy().Object
	patched, err := strategicpatch.StrategicMergeMapPatch(original, patchMap, schemaObj)
	if err != nil {
		return nil, interpretStrategicMergePatchError(err)
	}
	return checkResult(&unstructured.Unstructured{Object: patched}, current, opts, sch)
}

// checkResult restores or checks apiVersion and kind of a patched object
// and, unless opts skip it, its field types, as kube-apiserver's decoding
// of the result would.
func checkResult(result, current *unstructured.Unstructured, opts Options, sch *runtime.Scheme) (*unstructured.Unstructured, error) {
	if err := keepKind(result, current); err != nil {
		return nil, err
	}
	if !opts.SkipTypeCheck {
		if err := checkTyped(result, current, sch); err != nil {
			return nil, err
		}
	}
	return result, nil
}

// interpretStrategicMergePatchError maps strategicpatch errors to codes like
// kube-apiserver's function of the same name.
func interpretStrategicMergePatchError(err error) error {
	switch {
	case errors.Is(err, mergepatch.ErrBadJSONDoc), errors.Is(err, mergepatch.ErrBadPatchFormatForPrimitiveList),
		errors.Is(err, mergepatch.ErrBadPatchFormatForRetainKeys), errors.Is(err, mergepatch.ErrBadPatchFormatForSetElementOrderList),
		errors.Is(err, mergepatch.ErrUnsupportedStrategicMergePatchFormat):
		return apierrors.NewBadRequest("the strategic merge patch is malformed: " + sentinelText(err))
	case errors.Is(err, mergepatch.ErrNoListOfLists), errors.Is(err, mergepatch.ErrPatchContentNotMatchRetainKeys):
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
			Reason: metav1.StatusReasonInvalid, Message: "the strategic merge patch cannot be applied: " + sentinelText(err)}}
	}
	// kube-apiserver returns these raw, i.e. as a 500 (e.g. "unable to find
	// api field in struct ... for the json field ..." is 500 there). They are
	// all caused by the patch's shape, so we answer 400. Their text embeds
	// the stored object, which is not ours to echo.
	return apierrors.NewBadRequest("the strategic merge patch does not fit the object's schema (a field has the wrong type or the patch has an unknown directive)")
}

// sentinelText is the fixed text of the mergepatch sentinel err wraps:
// strategicpatch wraps them with the original object and the patch, which
// may hold stored values the caller could not read.
func sentinelText(err error) string {
	for _, sentinel := range []error{mergepatch.ErrBadJSONDoc, mergepatch.ErrNoListOfLists, mergepatch.ErrBadPatchFormatForPrimitiveList,
		mergepatch.ErrBadPatchFormatForRetainKeys, mergepatch.ErrBadPatchFormatForSetElementOrderList,
		mergepatch.ErrPatchContentNotMatchRetainKeys, mergepatch.ErrUnsupportedStrategicMergePatchFormat} {
		if errors.Is(err, sentinel) {
			return sentinel.Error()
		}
	}
	return "invalid patch"
}

// keepKind restores apiVersion/kind a patch removed (kube-apiserver decodes
// the result into the request's kind, so it defaults them) and rejects a
// patch that changes them.
func keepKind(result, current *unstructured.Unstructured) error {
	for _, key := range []string{"apiVersion", "kind"} {
		want := current.Object[key]
		got, present := result.Object[key]
		if !present || got == nil || got == "" {
			result.Object[key] = want
			continue
		}
		if got != want {
			// Name the field, never the values: a JSON patch can copy any
			// stored value into kind and read it back from this message.
			return invalidPatch(current, fmt.Sprintf("the patch changes %s; a patch cannot change the type of an object", key))
		}
	}
	return nil
}

// checkTyped reports a result that cannot be decoded into its typed struct
// (wrong value types), which kube-apiserver rejects with 422. Unknown fields
// are not an error (the apiserver drops them). Kinds outside the scheme are
// not checked.
func checkTyped(result, current *unstructured.Unstructured, sch *runtime.Scheme) error {
	typed, err := sch.New(result.GroupVersionKind())
	if err != nil {
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(result.Object, typed, false); err != nil {
		// The converter's errors name types, not values.
		return invalidPatch(current, "the patched object is not a valid "+result.GetKind()+": "+err.Error())
	}
	return nil
}

func checkNameAndNamespace(result, current *unstructured.Unstructured, opts Options) error {
	// Metadata that is no object names no name: kube-apiserver cannot
	// decode the patched object at all.
	if m := result.Object["metadata"]; m != nil {
		if _, ok := m.(map[string]interface{}); !ok {
			return invalidPatch(current, fmt.Sprintf("the patch makes metadata %s; metadata must be an object", body.Describe(m)))
		}
	}
	name := opts.Name
	if name == "" && current != nil {
		name = current.GetName()
	}
	var namespace string
	switch {
	case opts.Namespace != nil:
		namespace = *opts.Namespace
	case current != nil:
		namespace = current.GetNamespace()
	default:
		namespace = result.GetNamespace()
	}
	// rest.EnsureObjectNamespaceMatchesRequestNamespace
	switch objNamespace := result.GetNamespace(); {
	case objNamespace == namespace:
	case objNamespace == "":
		result.SetNamespace(namespace)
	case namespace == "":
		result.SetNamespace("")
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("the patch sets metadata.namespace, which does not match the namespace on the request (%s)", namespace))
	}
	// handlers.checkName
	if name != "" && result.GetName() != name {
		return apierrors.NewBadRequest(fmt.Sprintf("the patch sets metadata.name, which does not match the name on the URL (%s)", name))
	}
	return nil
}

// invalidPatch is kube-apiserver's 422 for a patch that cannot be applied or
// yields an invalid object (it reports field "patch" too), without echoing
// the whole patched object into the message as the apiserver does.
func invalidPatch(current *unstructured.Unstructured, msg string) *apierrors.StatusError {
	var gk schema.GroupKind
	var name string
	if current != nil {
		gk = current.GroupVersionKind().GroupKind()
		name = current.GetName()
	}
	return apierrors.NewInvalid(gk, name, field.ErrorList{field.Invalid(field.NewPath("patch"), field.OmitValueType{}, msg)})
}

func notFound(opts Options) *apierrors.StatusError {
	name := opts.Name
	if name == "" {
		name = "the object"
	} else {
		name = fmt.Sprintf("%q", name)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("%s does not exist: only an apply patch can create an object", name),
	}}
}

// unsupportedPatchType is kube-apiserver's 415 for a patch Content-Type the
// resource does not accept (negotiation.NewUnsupportedMediaTypeError).
func unsupportedPatchType(accepted []string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: "the body of the request was in an unknown format - accepted media types include: " + strings.Join(accepted, ", "),
	}}
}

func internalError(err error) *apierrors.StatusError {
	return apierrors.NewInternalError(err)
}

// applyMerge applies an RFC 7386 merge patch to current's map, without the
// JSON round trip of the whole object that byte-level merge patch libraries
// need, and without copying what the patch leaves alone: the result shares
// those members with current (see Apply).
func applyMerge(current *unstructured.Unstructured, patch []byte, opts Options) (*unstructured.Unstructured, error) {
	var p interface{}
	if err := utiljson.Unmarshal(patch, &p); err != nil {
		return nil, apierrors.NewBadRequest("the merge patch is not a valid JSON document: " + err.Error())
	}
	pm, ok := p.(map[string]interface{})
	switch {
	case p == nil:
		return nil, apierrors.NewBadRequest("the merge patch is not a valid JSON document: a merge patch must be a JSON object, got null")
	case !ok:
		// RFC 7386 lets a patch that is not an object replace the target;
		// kube-apiserver decodes a merge patch into an object first, for
		// every kind, and refuses anything else as a bad request.
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: a merge patch must be a JSON object, got %s", body.Describe(p)))
	}
	result := &unstructured.Unstructured{Object: merged(current.Object, pm)}
	// The name and namespace checks may set metadata in place; it must be
	// the result's own, also when the patch leaves metadata alone.
	if meta, ok := result.Object["metadata"].(map[string]interface{}); ok && !isObject(pm["metadata"]) {
		result.Object["metadata"] = maps.Clone(meta)
	}
	return checkResult(result, current, opts, opts.scheme())
}

func isObject(v interface{}) bool {
	_, ok := v.(map[string]interface{})
	return ok
}

// merged is patch merged into target (RFC 7386): null removes a member,
// objects merge recursively, anything else (arrays included) replaces. The
// result is a new map; neither target nor anything in it is modified, and
// members the patch does not name are target's own values, not copies.
// patch's values end up in the result.
func merged(target, patch map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(target)+len(patch))
	for k, v := range target {
		out[k] = v
	}
	for k, pv := range patch {
		switch v := pv.(type) {
		case nil:
			delete(out, k)
		case map[string]interface{}:
			t, _ := target[k].(map[string]interface{}) // not an object: merged into an empty one
			out[k] = merged(t, v)
		default:
			out[k] = pruneNulls(v)
		}
	}
	return out
}

// pruneNulls drops null members of objects inside a replaced value, as the
// json-patch library kube-apiserver uses does (also inside arrays).
func pruneNulls(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			t[k] = pruneNulls(e)
		}
	case []interface{}:
		for i, e := range t {
			t[i] = pruneNulls(e)
		}
	}
	return v
}

// applyJSONPatchOps applies ops to doc. The library panics on some
// operations it does not validate (a replace of the whole document without
// a value); such a patch is invalid input, answered as any other patch that
// cannot be applied, not a crash of the write.
func applyJSONPatchOps(ops jsonpatch.Patch, doc []byte) (patched []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			patched, err = nil, fmt.Errorf("an operation is malformed (%v)", r)
		}
	}()
	return ops.Apply(doc)
}

var patchOptionsKind = schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}

// IsOptionsError reports whether err refuses a patch for its options (a
// force without an apply, say), whatever the object it applies to.
func IsOptionsError(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Group == patchOptionsKind.Group && d.Kind == patchOptionsKind.Kind
}
