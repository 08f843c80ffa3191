package patch

import (
	"encoding/json"
	"strings"

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
		var ops []struct {
			Op   string  `json:"op"`
			Path string  `json:"path"`
			From *string `json:"from"`
		}
		if json.Unmarshal(patch, &ops) != nil {
			return false
		}
		for _, op := range ops {
			if !underMetadataOrStatus(op.Path) || (op.From != nil && op.Op == "move" && !underMetadataOrStatus(*op.From)) {
				return false
			}
		}
		return true
	}
	return false
}

func underMetadataOrStatus(pointer string) bool {
	for _, root := range []string{"/metadata", "/status"} {
		if pointer == root || strings.HasPrefix(pointer, root+"/") {
			return true
		}
	}
	return false
}
