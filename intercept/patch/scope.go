package patch

import (
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// OnlyMetadata reports whether patch can change nothing but metadata and
// status, whatever object it is applied to: a merge or strategic merge
// patch whose only top-level fields are metadata, status, apiVersion and
// kind, or a JSON patch whose operations all stay under /metadata and
// /status. Such a write cannot change the desired state, so a stale copy
// of the object cannot hide a change. Server-side apply is never such a
// patch: an apply configuration that omits a field it owned removes it.
func OnlyMetadata(patchType types.PatchType, patch []byte) bool {
	switch patchType {
	case types.MergePatchType, types.StrategicMergePatchType:
		only := true
		isObject := objectMembers(patch, func(name string) bool {
			only = !desired.HoldsDesiredState(name)
			return only
		})
		return isObject && only
	case types.JSONPatchType:
		ops, ok := jsonPatchTargets(patch)
		if !ok {
			return false
		}
		for _, op := range ops {
			if !underMetadataOrStatus(op.path) || (op.from != nil && op.op == "move" && !underMetadataOrStatus(*op.from)) {
				return false
			}
		}
		return true
	}
	return false
}

// jsonPatchTarget is what one JSON patch operation touches.
type jsonPatchTarget struct {
	// path and from are as kube-apiserver's library resolves them.
	op, path string
	// from is nil when the operation has none.
	from *string
	// operation is the operation as kube-apiserver reads it.
	operation jsonpatch.Operation
}

// jsonPatchTargets reads the operations of patch as kube-apiserver does,
// with the library it uses: each operation is an object whose members are
// looked up by their exact names, the last of duplicates winning. A Go
// struct would match "Path" or "PATH" as well, so that a decoy member
// could make an operation look as if it touched another path than the one
// kube-apiserver applies. It reports false for a patch kube-apiserver
// cannot decode, or an operation without a path.
//
// Paths are as the library resolves them (jsonPatchPath), not as written:
// it drops whatever comes before the first "/", so "spec/metadata/x"
// addresses /metadata/x, and a check of the written path would take it for
// a change of the spec.
func jsonPatchTargets(patch []byte) ([]jsonPatchTarget, bool) {
	ops, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, false
	}
	targets := make([]jsonPatchTarget, 0, len(ops))
	for _, op := range ops {
		path, err := op.Path()
		if err != nil {
			return nil, false
		}
		t := jsonPatchTarget{op: op.Kind(), path: jsonPatchPath(path), operation: op}
		if _, named := op["from"]; named {
			from, err := op.From()
			if err != nil {
				return nil, false
			}
			from = jsonPatchPath(from)
			t.from = &from
		}
		targets = append(targets, t)
	}
	return targets, true
}

func underMetadataOrStatus(pointer string) bool {
	for _, root := range []string{"/metadata", "/status"} {
		if pointer == root || strings.HasPrefix(pointer, root+"/") {
			return true
		}
	}
	return false
}
