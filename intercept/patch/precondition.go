package patch

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	for _, op := range ops {
		var path, kind string
		_ = json.Unmarshal(op["path"], &path)
		_ = json.Unmarshal(op["op"], &kind)
		switch {
		case path != "/metadata/resourceVersion" && path != "/metadata":
		case kind == "remove":
			named = false
		case kind == "test" && path == "/metadata/resourceVersion":
			// The stored object must have that version, and keeps it.
			named = named || !isEmptyString(op["value"])
		case kind != "add" && kind != "replace":
		case path == "/metadata":
			named = namesResourceVersion(op["value"])
		default:
			named = !isNull(op["value"]) && !isEmptyString(op["value"])
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
	if applied.GetResourceVersion() != "" {
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
