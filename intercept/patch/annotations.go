package patch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/body"
)

// ErrNotRewritable is returned (wrapped) by AddAnnotations for a valid patch
// that cannot be made to also set the annotations without changing what it
// does otherwise. The caller should forward such a patch unchanged.
var ErrNotRewritable = errors.New("the patch cannot be rewritten to set annotations")

// AddAnnotations rewrites patch so that, applied, it also sets the given
// annotations (a nil value removes the annotation). effective is the object
// the original patch produces (Apply's result); JSON patches need it to know
// whether metadata.annotations exists at the point the appended operations
// run.
//
//   - merge and strategic merge patch: the annotations are merged into the
//     patch's metadata.annotations (null removes). The user's other fields
//     are passed through byte for byte. A merge patch that sets
//     metadata.annotations (or metadata) to null, i.e. clears all
//     annotations, cannot also set some: ErrNotRewritable. A strategic merge
//     patch does the same with "$patch": "replace".
//   - JSON patch: operations are appended: "add" (which replaces an existing
//     member) per annotation to set, "remove" per annotation to remove that
//     exists in effective; if effective has no annotations map, a single
//     "add" of /metadata/annotations. Keys are escaped per RFC 6901. If the
//     object the apiserver patches differs from the one effective was computed
//     from (a stale read), the apiserver may reject the patch with 422; the
//     client then retries like on any conflict.
//   - apply (YAML or CBOR): the annotations are set in the apply
//     configuration, which makes this field manager their owner. Removal
//     drops the key from the configuration; under server-side apply semantics
//     that removes the annotation only if this manager owned it before (a key
//     owned by another manager stays).
//
// The result of a YAML apply patch is JSON (which is YAML); a CBOR apply
// patch stays CBOR. Errors for malformed patches are 400 StatusErrors.
func AddAnnotations(patchType types.PatchType, patch []byte, annotations map[string]*string, effective *unstructured.Unstructured) ([]byte, error) {
	if len(annotations) == 0 {
		return patch, nil
	}
	switch patchType {
	case types.MergePatchType:
		return addToMergePatch(patch, annotations, false)
	case types.StrategicMergePatchType:
		return addToMergePatch(patch, annotations, true)
	case types.JSONPatchType:
		return addToJSONPatch(patch, annotations, effective)
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		return addToApplyPatch(patchType, patch, annotations)
	}
	return nil, unsupportedPatchType(SupportedPatchTypes)
}

func sortedKeys(m map[string]*string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var jsonNull = json.RawMessage("null")

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), jsonNull) }

// addToMergePatch edits only metadata.annotations; everything else in the
// patch stays as the client sent it, byte for byte (json.RawMessage).
func addToMergePatch(patch []byte, annotations map[string]*string, strategic bool) ([]byte, error) {
	if members, ok := withoutMetadata(patch); ok {
		return spliceMetadata(members, annotations), nil
	}
	return rewriteMergePatch(patch, annotations, strategic)
}

// rewriteMergePatch adds the annotations to a patch that has metadata of
// its own, or that may not be a JSON object at all.
func rewriteMergePatch(patch []byte, annotations map[string]*string, strategic bool) ([]byte, error) {
	kind := "merge patch"
	if strategic {
		kind = "strategic merge patch"
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(patch, &top); err != nil || top == nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the %s is not a JSON object: %v", kind, errOrNull(err)))
	}
	var meta map[string]json.RawMessage
	if raw, ok := top["metadata"]; ok {
		if isNull(raw) {
			return nil, fmt.Errorf("%w: the %s sets metadata to null", ErrNotRewritable, kind)
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the %s has a metadata that is not an object: %v", kind, err))
		}
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	var ann map[string]json.RawMessage
	replace := false
	if raw, ok := meta["annotations"]; ok {
		if isNull(raw) {
			if !strategic {
				return nil, fmt.Errorf("%w: the merge patch removes all annotations (metadata.annotations: null)", ErrNotRewritable)
			}
			replace = true
		} else if err := json.Unmarshal(raw, &ann); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the %s has metadata.annotations that are not an object: %v", kind, err))
		}
	}
	if ann == nil {
		ann = map[string]json.RawMessage{}
	}
	if strategic {
		if raw, ok := ann["$patch"]; ok {
			var directive string
			_ = json.Unmarshal(raw, &directive)
			switch directive {
			case "delete":
				// Deleting the map and then setting keys is replacing it.
				ann = map[string]json.RawMessage{}
				replace = true
			case "replace":
				replace = true
			}
		}
		if replace {
			ann["$patch"] = json.RawMessage(`"replace"`)
		}
	}
	for _, k := range sortedKeys(annotations) {
		v := annotations[k]
		switch {
		case v != nil:
			ann[k] = appendJSONString(nil, *v)
		case replace:
			delete(ann, k) // absent from a replacing map = removed
		default:
			ann[k] = jsonNull
		}
	}
	meta["annotations"] = appendObject(nil, ann)
	top["metadata"] = appendObject(nil, meta)
	return appendObject(nil, top), nil
}

// withoutMetadata returns the members of patch, everything after its
// opening brace, when patch is a JSON object without a metadata member.
// Such a patch, the usual one of a controller, gets the annotations as one
// new member: nothing of the client's has to be decoded into a map and
// encoded again. Keys are matched case-sensitively, as kube-apiserver
// applies a merge patch.
func withoutMetadata(patch []byte) ([]byte, bool) {
	// A metadata member, even null, is edited by the general path; so is
	// anything that is not a JSON object, which it answers with a 400.
	hasMetadata := false
	isObject := objectMembers(patch, func(name string) bool {
		hasMetadata = name == "metadata"
		return !hasMetadata
	})
	if !isObject || hasMetadata {
		return nil, false
	}
	return bytes.TrimLeft(patch, " \t\r\n")[1:], true
}

// spliceMetadata is the object whose members are metadata.annotations
// (nil values as null, to remove) followed by members, the client's
// members after its object's opening brace, as they came.
func spliceMetadata(members []byte, annotations map[string]*string) []byte {
	keys := sortedKeys(annotations)
	size := len(`{"metadata":{"annotations":{}}},`) + len(members)
	for _, k := range keys {
		size += len(k) + 8
		if v := annotations[k]; v != nil {
			size += len(*v) + len(*v)/8
		}
	}
	out := make([]byte, 0, size)
	out = append(out, `{"metadata":{"annotations":{`...)
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, k)
		out = append(out, ':')
		if v := annotations[k]; v != nil {
			out = appendJSONString(out, *v)
		} else {
			out = append(out, jsonNull...)
		}
	}
	out = append(out, "}}"...)
	if rest := bytes.TrimLeft(members, " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, members...)
}

// appendObject appends the JSON object of members, sorted by key. The
// values are written as they are: each is valid JSON, either as the client
// sent it (json.Unmarshal checked it) or as this package encoded it, so
// the client's bytes pass through unchanged and nothing is encoded twice.
func appendObject(dst []byte, members map[string]json.RawMessage) []byte {
	size := 2
	for k, v := range members {
		size += len(k) + len(v) + 4 // quotes, colon, comma; escapes may need more
	}
	dst = slices.Grow(dst, size)
	return appendSortedObject(dst, members, func(dst []byte, v json.RawMessage) []byte { return append(dst, v...) })
}

// appendSortedObject appends m as a JSON object, its keys sorted as
// json.Marshal sorts them, each value written by appendValue.
func appendSortedObject[V any](dst []byte, m map[string]V, appendValue func([]byte, V) []byte) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendValue(dst, m[k])
	}
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string, as json.Marshal encodes it.
// Quotes and backslashes, which every trace annotation is full of, are
// escaped here; json.Marshal is left what needs more (control
// characters, HTML characters, non-ASCII and invalid UTF-8).
func appendJSONString(dst []byte, s string) []byte {
	quoted := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			quoted++
		case c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&':
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = slices.Grow(dst, len(s)+quoted+2)
	dst = append(dst, '"')
	if quoted == 0 {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}

func errOrNull(err error) string {
	if err == nil {
		return "got null"
	}
	return err.Error()
}

// EscapeJSONPointer escapes one reference token per RFC 6901.
func EscapeJSONPointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

type jsonPatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"` // empty only for "remove"
}

func rawJSON(v interface{}) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only strings and maps of strings are marshaled here
	}
	return b
}

func addToJSONPatch(patch []byte, annotations map[string]*string, effective *unstructured.Unstructured) ([]byte, error) {
	var ops []json.RawMessage
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the JSON patch is not a JSON array of operations: %v", err))
	}
	if effective == nil {
		return nil, internalError(errors.New("AddAnnotations: a JSON patch needs the effective object"))
	}
	var existing map[string]interface{}
	metaVal, hasMeta := effective.Object["metadata"]
	meta, metaIsMap := metaVal.(map[string]interface{})
	hasMeta = hasMeta && metaIsMap
	if hasMeta {
		existing, _ = meta["annotations"].(map[string]interface{})
	}

	var add []jsonPatchOp
	if existing != nil {
		for _, k := range sortedKeys(annotations) {
			path := "/metadata/annotations/" + EscapeJSONPointer(k)
			if v := annotations[k]; v != nil {
				add = append(add, jsonPatchOp{Op: "add", Path: path, Value: rawJSON(*v)})
			} else if _, ok := existing[k]; ok {
				add = append(add, jsonPatchOp{Op: "remove", Path: path})
			}
		}
	} else {
		set := map[string]string{}
		for k, v := range annotations {
			if v != nil {
				set[k] = *v
			}
		}
		switch {
		case len(set) == 0:
			// Only removals, and there is nothing to remove.
		case hasMeta:
			add = append(add, jsonPatchOp{Op: "add", Path: "/metadata/annotations", Value: rawJSON(set)})
		default:
			add = append(add, jsonPatchOp{Op: "add", Path: "/metadata", Value: rawJSON(map[string]interface{}{"annotations": set})})
		}
	}
	for _, op := range add {
		b, err := json.Marshal(op)
		if err != nil {
			return nil, internalError(err)
		}
		ops = append(ops, b)
	}
	out, err := json.Marshal(ops)
	if err != nil {
		return nil, internalError(err)
	}
	return out, nil
}

func addToApplyPatch(patchType types.PatchType, patch []byte, annotations map[string]*string) ([]byte, error) {
	applied, err := decodeApplyConfiguration(patchType, patch)
	if err != nil {
		return nil, err
	}
	obj := applied.Object
	meta, ok := obj["metadata"].(map[string]interface{})
	if !ok {
		if m, present := obj["metadata"]; present && m != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the apply configuration has a metadata that is not an object (%s)", body.Describe(m)))
		}
		meta = map[string]interface{}{}
		obj["metadata"] = meta
	}
	ann, ok := meta["annotations"].(map[string]interface{})
	if !ok {
		if a, present := meta["annotations"]; present && a != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the apply configuration has metadata.annotations that are not an object (%s)", body.Describe(a)))
		}
		ann = map[string]interface{}{}
	}
	for k, v := range annotations {
		if v == nil {
			delete(ann, k)
		} else {
			ann[k] = *v
		}
	}
	if len(ann) == 0 {
		delete(meta, "annotations")
	} else {
		meta["annotations"] = ann
	}

	if patchType == types.ApplyCBORPatchType {
		b, err := cbor.Marshal(obj)
		if err != nil {
			return nil, internalError(err)
		}
		if bytes.HasPrefix(patch, selfDescribedCBOR) {
			b = append(append([]byte{}, selfDescribedCBOR...), b...)
		}
		return b, nil
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, internalError(err)
	}
	return b, nil
}

var selfDescribedCBOR = []byte{0xd9, 0xd9, 0xf7}
