package patch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fxamacker/cbor/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// WithResourceVersion rewrites patch so that kube-apiserver applies it only
// to the object at resourceVersion: a patched object whose
// metadata.resourceVersion differs from the stored one is a conflict
// (409), so the write cannot land on a state other than the one it was
// decided on. A patch that names a resourceVersion itself keeps its own
// (the client's precondition). One that clears it (null, "", a JSON patch
// that removes it) would make kube-apiserver update unconditionally; it
// gets resourceVersion instead. ok is false when the patch cannot carry
// one without changing what it does (a merge patch that sets metadata to
// null); it is then returned unchanged.
//
//   - merge and strategic merge patch: metadata.resourceVersion is set;
//     every other byte is the client's.
//   - JSON patch: an "add" of /metadata/resourceVersion is appended, after
//     whatever the client's operations do to it.
//   - apply (YAML or CBOR): the apply configuration names the
//     resourceVersion, which server-side apply treats as a precondition.
//
// patched is the object the patch makes of the stored one as the proxy
// computed it (nil when unknown): when a JSON patch's operations give the
// resourceVersion a value the proxy cannot read from them (copied or moved
// from elsewhere), the value they gave patched decides.
func WithResourceVersion(patchType types.PatchType, patch []byte, resourceVersion string, patched metav1.Object) (out []byte, ok bool, err error) {
	if resourceVersion == "" {
		return patch, false, nil
	}
	switch patchType {
	case types.MergePatchType, types.StrategicMergePatchType:
		return mergeWithResourceVersion(patch, resourceVersion)
	case types.JSONPatchType:
		return jsonPatchWithResourceVersion(patch, resourceVersion, patched)
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		return applyWithResourceVersion(patchType, patch, resourceVersion)
	}
	return nil, false, unsupportedPatchType(SupportedPatchTypes)
}

func mergeWithResourceVersion(patch []byte, rv string) ([]byte, bool, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(patch, &top); err != nil || top == nil {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the merge patch is not a JSON object: %v", errOrNull(err)))
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := top["metadata"]; ok {
		if isNull(raw) {
			return patch, false, nil
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the merge patch has a metadata that is not an object: %v", err))
		}
	}
	if own, named := meta["resourceVersion"]; named && !isNull(own) && !isUnnamedVersion(own) {
		return patch, false, nil
	}
	if raw, ok := meta["$retainKeys"]; ok {
		// A strategic merge patch's $retainKeys lists every member the
		// map keeps; one it does not list makes the patch malformed.
		var keys []string
		if err := json.Unmarshal(raw, &keys); err != nil {
			return patch, false, nil
		}
		if !slices.Contains(keys, "resourceVersion") {
			meta["$retainKeys"] = rawJSON(append(keys, "resourceVersion"))
		}
	}
	meta["resourceVersion"] = rawJSON(rv)
	top["metadata"] = rawJSON(meta)
	b, err := json.Marshal(top)
	if err != nil {
		return nil, false, internalError(err)
	}
	return b, true, nil
}

func jsonPatchWithResourceVersion(patch []byte, rv string, patched metav1.Object) ([]byte, bool, error) {
	var ops []map[string]json.RawMessage
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the JSON patch is not an array of operations: %v", err))
	}
	if len(ops) >= MaxJSONPatchOperations {
		// One more operation would make kube-apiserver refuse it.
		return patch, false, nil
	}
	if jsonPatchNamesResourceVersion(ops, patched) {
		return patch, false, nil
	}
	ops = append(ops, map[string]json.RawMessage{"op": rawJSON("add"), "path": rawJSON("/metadata/resourceVersion"), "value": rawJSON(rv)})
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, false, internalError(err)
	}
	return b, true, nil
}

// jsonPatchNamesResourceVersion reports whether the object ops leave
// names a resourceVersion of the client's, as kube-apiserver's JSON patch
// library reads the operations: a path is taken from its first "/" on
// (what comes before is ignored), and "" is the whole object.
func jsonPatchNamesResourceVersion(ops []map[string]json.RawMessage, patched metav1.Object) bool {
	const version = "/metadata/resourceVersion"
	affects := func(path string) bool { return path == "" || path == "/metadata" || path == version }
	tested, changed := false, false
	// named is what the operations say when they set it to a value they
	// carry; known is false once one gives it a value they do not.
	named, known := false, true
	for _, op := range ops {
		var rawPath, rawFrom, kind string
		_ = json.Unmarshal(op["path"], &rawPath)
		_, hasFrom := op["from"]
		_ = json.Unmarshal(op["from"], &rawFrom)
		_ = json.Unmarshal(op["op"], &kind)
		path, from := jsonPatchPath(rawPath), jsonPatchPath(rawFrom)
		switch {
		case kind == "move" && hasFrom && from == "":
			changed, known = true, false
		case kind == "move" && hasFrom && affects(from):
			// Moved away: the object keeps none (unless moved back,
			// which a later operation says).
			changed, named, known = true, false, true
		case !affects(path):
		case kind == "test":
			// The stored object must have that version, and keeps it
			// unless a later operation changes it.
			tested = tested || path == version && nonEmptyString(op["value"])
		case kind == "add" || kind == "replace":
			changed, known = true, true
			switch path {
			case "":
				named = namesResourceVersion(objectMember(op["value"], "metadata"))
			case "/metadata":
				named = namesResourceVersion(op["value"])
			default:
				named = namesVersionValue(op["value"])
			}
		case kind == "remove":
			changed, named, known = true, false, true
		default:
			// Copied or moved onto it from elsewhere: a value the
			// operations do not carry.
			changed, known = true, false
		}
	}
	switch {
	case !changed:
		return tested
	case known:
		return named
	case patched != nil:
		return NamesVersion(patched.GetResourceVersion())
	}
	return false
}

// jsonPatchPath is path as the JSON patch library resolves it: from its
// first "/" on, or "" (the whole object) when it has none.
func jsonPatchPath(path string) string {
	if i := strings.IndexByte(path, '/'); i >= 0 {
		return path[i:]
	}
	return ""
}

// objectMember is member name of the JSON object raw (nil when raw is no
// object or lacks it).
func objectMember(raw json.RawMessage, name string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return nil
	}
	return obj[name]
}

func applyWithResourceVersion(patchType types.PatchType, patch []byte, rv string) ([]byte, bool, error) {
	applied, err := decodeApplyConfiguration(patchType, patch)
	if err != nil {
		return nil, false, err
	}
	if v, found, _ := unstructured.NestedFieldNoCopy(applied.Object, "metadata", "resourceVersion"); found && v != nil {
		// The client's own; one that is no string is refused by
		// kube-apiserver as it is.
		if s, isString := v.(string); !isString || NamesVersion(s) {
			return patch, false, nil
		}
	}
	switch m, found := applied.Object["metadata"]; {
	case found && m == nil:
		// metadata: null names nothing, and would keep the precondition
		// from being set.
		applied.Object["metadata"] = map[string]interface{}{}
	case found:
		if _, isMap := m.(map[string]interface{}); !isMap {
			// kube-apiserver refuses it as it is.
			return patch, false, nil
		}
	}
	applied.SetResourceVersion(rv)
	if patchType == types.ApplyCBORPatchType {
		b, err := cbor.Marshal(applied.Object)
		if err != nil {
			return nil, false, internalError(err)
		}
		if bytes.HasPrefix(patch, selfDescribedCBOR) {
			b = append(append([]byte{}, selfDescribedCBOR...), b...)
		}
		return b, true, nil
	}
	b, err := json.Marshal(applied.Object)
	if err != nil {
		return nil, false, internalError(err)
	}
	return b, true, nil
}

// nonEmptyString reports whether raw is a JSON string other than "".
func nonEmptyString(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && s != ""
}

// namesVersionValue reports whether raw is a JSON string naming a
// resourceVersion (NamesVersion).
func namesVersionValue(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && NamesVersion(s)
}

// isUnnamedVersion reports whether raw is a JSON string kube-apiserver
// reads as no resourceVersion ("0"): a precondition written over it
// changes nothing the client asked for.
func isUnnamedVersion(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && !NamesVersion(s)
}

// NamesResourceVersion reports whether patch names the resourceVersion it
// was made on, so that kube-apiserver applies it only to the object at
// that version: a merge patch or an apply configuration with a non-empty
// metadata.resourceVersion, or a JSON patch that tests, adds or replaces
// it and leaves patched (the stored object with the patch applied, nil
// when unknown) with one. A patch kube-apiserver would refuse names none.
func NamesResourceVersion(patchType types.PatchType, patch []byte, patched metav1.Object) bool {
	switch patchType {
	case types.MergePatchType, types.StrategicMergePatchType:
		var top map[string]json.RawMessage
		if json.Unmarshal(patch, &top) != nil {
			return false
		}
		return namesResourceVersion(top["metadata"])
	case types.JSONPatchType:
		// kube-apiserver compares the patched object's resourceVersion:
		// one replaced with "" or removed again names none.
		targets, ok := jsonPatchTargets(patch)
		if !ok || patched == nil || !NamesVersion(patched.GetResourceVersion()) {
			return false
		}
		for _, t := range targets {
			switch {
			case t.op != "test" && t.op != "add" && t.op != "replace":
			case t.path == "/metadata/resourceVersion":
				return true
			case t.path == "/metadata" && t.op != "test":
				if raw := t.operation["value"]; raw != nil && namesResourceVersion(*raw) {
					return true
				}
			}
		}
		return false
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		applied, err := decodeApplyConfiguration(patchType, patch)
		return err == nil && NamesVersion(applied.GetResourceVersion())
	}
	return false
}

// namesResourceVersion reports whether metadata, a JSON object, has a
// non-empty resourceVersion member (by its exact name, as kube-apiserver
// reads it).
func namesResourceVersion(metadata json.RawMessage) bool {
	var meta map[string]json.RawMessage
	if len(metadata) == 0 || json.Unmarshal(metadata, &meta) != nil {
		return false
	}
	return namesVersionValue(meta["resourceVersion"])
}
