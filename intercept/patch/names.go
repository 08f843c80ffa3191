package patch

import (
	"bytes"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// namesProbeValue is what the probe object holds under each key: no patch
// sets it by chance.
const namesProbeValue = "kausality-proxy probe: 6b0c2f1e"

// NamesAnnotation reports whether a patch of patchType, applied to an
// object of kind, could set or remove any of keys in its
// metadata.annotations, whatever the object holds: a patch that names one,
// or replaces or removes the annotations or the metadata whole. It is
// told by applying the patch to an object that holds every key: whatever
// the result lacks or changes is named. A patch that does not apply there
// counts as naming them (kube-apiserver may apply it to the stored
// object). An apply configuration names what it holds: it removes only
// what its field manager set before, and a field manager may not have set
// these keys without naming them.
func NamesAnnotation(patchType types.PatchType, data []byte, keys []string, kind schema.GroupVersionKind) bool {
	switch patchType {
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		cfg, err := decodeApplyConfiguration(patchType, data)
		if err != nil {
			return true
		}
		held := cfg.GetAnnotations()
		for _, k := range keys {
			if _, ok := held[k]; ok {
				return true
			}
		}
		return false
	case types.MergePatchType, types.StrategicMergePatchType:
		// A patch that says nothing of metadata, in any spelling, leaves
		// the annotations alone.
		if !bytes.Contains(data, []byte("metadata")) && !bytes.Contains(data, []byte(`\u`)) && !bytes.Contains(data, []byte("$patch")) {
			return false
		}
	case types.JSONPatchType:
		// So does a JSON patch whose paths say nothing of metadata and
		// none of which is the whole object, whether or not it applies
		// to the probe.
		if !bytes.Contains(data, []byte("metadata")) && !bytes.Contains(data, []byte(`\u`)) {
			if targets, ok := jsonPatchTargets(data); ok && !touchesWholeObject(targets) {
				return false
			}
		}
	}
	annotations := make(map[string]interface{}, len(keys))
	for _, k := range keys {
		annotations[k] = namesProbeValue
	}
	probe := &unstructured.Unstructured{Object: map[string]interface{}{
		"metadata": map[string]interface{}{"name": "probe", "annotations": annotations},
	}}
	probe.SetGroupVersionKind(kind)
	ns := ""
	result, err := Apply(patchType, probe, data, Options{Kind: kind, Name: "probe", Namespace: &ns, SkipTypeCheck: true})
	if err != nil {
		return true
	}
	after := result.GetAnnotations()
	for _, k := range keys {
		if after[k] != namesProbeValue {
			return true
		}
	}
	return false
}

// touchesWholeObject reports whether an operation's path or from is the
// whole object, as kube-apiserver's JSON patch library resolves it.
func touchesWholeObject(targets []jsonPatchTarget) bool {
	for _, t := range targets {
		if t.path == "" || t.from != nil && *t.from == "" {
			return true
		}
	}
	return false
}
