package patch

import (
	"encoding/json"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// OnMetadata is what a JSON patch or an apply makes of an object known
// only by its metadata (its spec, data and status unknown).
type OnMetadata struct {
	// Object is the metadata the write stores (for an apply, with the
	// Kausality annotations it omits removed), beside whatever content an
	// apply configuration names.
	Object *unstructured.Unstructured
	// ChangesContent: the write may change the object's desired state
	// (anything but apiVersion, kind, metadata and status). Whether it
	// does depends on the content, so it counts as a change.
	ChangesContent bool
}

// ApplyToMetadata applies a JSON patch or an apply configuration to view,
// the stored object's metadata without its managedFields. ok is false when
// the metadata the write stores depends on more than view holds: a JSON
// patch that replaces the whole object, copies or moves a value between
// metadata and content, or whose metadata operations do not apply to view;
// an apply that does not keep the stored controller reference (whether it
// removes it depends on the field ownership the view lacks). The whole
// object is then needed.
//
// An apply removes the fields its manager owned and omits; who owns the
// Kausality annotations is not in view, so every one the configuration
// omits counts as removed: the decision then keeps them as stored, which
// the forwarded write carries, and a verdict that turns on their removal is
// made again on the whole object.
func ApplyToMetadata(patchType types.PatchType, view *unstructured.Unstructured, patch []byte, opts Options) (result OnMetadata, ok bool) {
	switch patchType {
	case types.JSONPatchType:
		return jsonPatchToMetadata(view, patch, opts)
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		return applyToMetadata(patchType, view, patch)
	}
	return OnMetadata{}, false
}

func jsonPatchToMetadata(view *unstructured.Unstructured, patch []byte, opts Options) (OnMetadata, bool) {
	ops, ok := jsonPatchTargets(patch)
	if !ok || len(ops) > MaxJSONPatchOperations {
		return OnMetadata{}, false
	}
	var (
		onMetadata jsonpatch.Patch
		changes    bool
	)
	for _, op := range ops {
		to := partOf(op.path)
		from := to
		if op.from != nil && (op.op == "move" || op.op == "copy") {
			from = partOf(*op.from)
		}
		switch {
		case to == wholeObject || from == wholeObject, from != to:
			return OnMetadata{}, false
		case op.op == "copy":
			// Copies can double a value with every operation: the patch is
			// applied whole, within the proxy's copy budget, so an
			// amplifying patch is refused here and never forwarded.
			return OnMetadata{}, false
		case to == metadataPart:
			onMetadata = append(onMetadata, op.operation)
		case to == desiredPart && op.op != "test":
			// A test of content is kube-apiserver's to make; it changes
			// nothing.
			changes = true
		}
	}
	if len(onMetadata) == 0 {
		return OnMetadata{Object: view.DeepCopy(), ChangesContent: changes}, true
	}
	data, err := json.Marshal(onMetadata)
	if err != nil {
		return OnMetadata{}, false
	}
	out, err := Apply(types.JSONPatchType, view, data, opts)
	if err != nil {
		return OnMetadata{}, false
	}
	return OnMetadata{Object: out, ChangesContent: changes}, true
}

// part is the part of an object a JSON pointer addresses.
type part int

const (
	wholeObject part = iota
	metadataPart
	statusPart
	desiredPart
)

func partOf(pointer string) part {
	if pointer == "" {
		return wholeObject
	}
	top, _, _ := strings.Cut(strings.TrimPrefix(pointer, "/"), "/")
	switch {
	case desired.HoldsDesiredState(top):
		return desiredPart
	case top == "status":
		return statusPart
	}
	return metadataPart
}

func applyToMetadata(patchType types.PatchType, view *unstructured.Unstructured, patch []byte) (OnMetadata, bool) {
	config, err := decodeApplyConfiguration(patchType, patch)
	if err != nil {
		return OnMetadata{}, false
	}
	if name := config.GetName(); name != "" && name != view.GetName() {
		return OnMetadata{}, false
	}
	stored := metav1.GetControllerOfNoCopy(view)
	applied := metav1.GetControllerOfNoCopy(config)
	if (stored == nil) != (applied == nil) || stored != nil && stored.UID != applied.UID {
		return OnMetadata{}, false
	}
	out := view.DeepCopy()
	kept := map[string]string{}
	for k, v := range view.GetAnnotations() {
		if !annotations.IsKausality(k) {
			kept[k] = v
		}
	}
	for k, v := range config.GetAnnotations() {
		kept[k] = v
	}
	out.SetAnnotations(kept)
	if labels := config.GetLabels(); len(labels) > 0 {
		merged := out.GetLabels()
		if merged == nil {
			merged = map[string]string{}
		}
		for k, v := range labels {
			merged[k] = v
		}
		out.SetLabels(merged)
	}
	for k, v := range config.Object {
		if desired.HoldsDesiredState(k) {
			out.Object[k] = v
		}
	}
	// An apply that omits a field its manager owned removes it: the
	// content may change whatever the configuration names.
	return OnMetadata{Object: out, ChangesContent: true}, true
}
