package patch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

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
func WithResourceVersion(patchType types.PatchType, patch []byte, resourceVersion string) (out []byte, ok bool, err error) {
	if resourceVersion == "" {
		return patch, false, nil
	}
	switch patchType {
	case types.MergePatchType, types.StrategicMergePatchType:
		return mergeWithResourceVersion(patch, resourceVersion)
	case types.JSONPatchType:
		return jsonPatchWithResourceVersion(patch, resourceVersion)
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
	if own, named := meta["resourceVersion"]; named && !isNull(own) && !isEmptyString(own) {
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

func jsonPatchWithResourceVersion(patch []byte, rv string) ([]byte, bool, error) {
	var ops []map[string]json.RawMessage
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the JSON patch is not an array of operations: %v", err))
	}
	// Whether the object the operations leave names a resourceVersion, as
	// far as they decide it: a later operation undoes an earlier one.
	named := false
	touches := func(path string) bool { return path == "/metadata/resourceVersion" || path == "/metadata" }
	for _, op := range ops {
		var path, from, kind string
		_ = json.Unmarshal(op["path"], &path)
		_ = json.Unmarshal(op["from"], &from)
		_ = json.Unmarshal(op["op"], &kind)
		switch {
		case kind == "move" && touches(from):
			// Moved away: the object keeps none.
			named = false
		case !touches(path):
		case kind == "test":
			// The stored object must have that version, and keeps it.
			named = named || path == "/metadata/resourceVersion" && nonEmptyString(op["value"])
		case kind == "add" || kind == "replace":
			if path == "/metadata" {
				named = namesResourceVersion(op["value"])
			} else {
				named = nonEmptyString(op["value"])
			}
		default:
			// Removed, or copied or moved from elsewhere: a value the
			// proxy does not know.
			named = false
		}
	}
	if named {
		return patch, false, nil
	}
	ops = append(ops, map[string]json.RawMessage{"op": rawJSON("add"), "path": rawJSON("/metadata/resourceVersion"), "value": rawJSON(rv)})
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, false, internalError(err)
	}
	return b, true, nil
}

func applyWithResourceVersion(patchType types.PatchType, patch []byte, rv string) ([]byte, bool, error) {
	applied, err := decodeApplyConfiguration(patchType, patch)
	if err != nil {
		return nil, false, err
	}
	if v, found, _ := unstructured.NestedFieldNoCopy(applied.Object, "metadata", "resourceVersion"); found && v != nil && v != "" {
		// The client's own; one that is no string is refused by
		// kube-apiserver as it is.
		return patch, false, nil
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

// isEmptyString reports whether raw is the JSON string "".
func isEmptyString(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && s == ""
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
		if !ok || patched == nil || patched.GetResourceVersion() == "" {
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
		return err == nil && applied.GetResourceVersion() != ""
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
	var rv string
	return json.Unmarshal(meta["resourceVersion"], &rv) == nil && rv != ""
}
