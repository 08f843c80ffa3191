package objects

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// metadataContent is what runtime.DefaultUnstructuredConverter.ToUnstructured
// makes of m, built directly. Every write decided on a cached child converts
// its metadata, and the converter's reflection was the largest share of
// that read. managedFields, which the cache of children drops, go through
// the converter when present.
func metadataContent(m *metav1.ObjectMeta) (map[string]interface{}, error) {
	if len(m.ManagedFields) > 0 {
		return runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	}
	out := make(map[string]interface{}, 12)
	str := func(key, v string) {
		if v != "" {
			out[key] = v
		}
	}
	str("name", m.Name)
	str("generateName", m.GenerateName)
	str("namespace", m.Namespace)
	str("selfLink", m.SelfLink) //nolint:staticcheck // objects stored long ago may still carry it; the converter keeps it
	str("uid", string(m.UID))
	str("resourceVersion", m.ResourceVersion)
	if m.Generation != 0 {
		out["generation"] = m.Generation
	}
	if !m.CreationTimestamp.IsZero() {
		out["creationTimestamp"] = m.CreationTimestamp.UTC().Format(time.RFC3339)
	}
	if m.DeletionTimestamp != nil {
		out["deletionTimestamp"] = m.DeletionTimestamp.UTC().Format(time.RFC3339)
	}
	if m.DeletionGracePeriodSeconds != nil {
		out["deletionGracePeriodSeconds"] = *m.DeletionGracePeriodSeconds
	}
	if len(m.Labels) > 0 {
		out["labels"] = stringMap(m.Labels)
	}
	if len(m.Annotations) > 0 {
		out["annotations"] = stringMap(m.Annotations)
	}
	if len(m.OwnerReferences) > 0 {
		refs := make([]interface{}, len(m.OwnerReferences))
		for i, r := range m.OwnerReferences {
			ref := map[string]interface{}{"apiVersion": r.APIVersion, "kind": r.Kind, "name": r.Name, "uid": string(r.UID)}
			if r.Controller != nil {
				ref["controller"] = *r.Controller
			}
			if r.BlockOwnerDeletion != nil {
				ref["blockOwnerDeletion"] = *r.BlockOwnerDeletion
			}
			refs[i] = ref
		}
		out["ownerReferences"] = refs
	}
	if len(m.Finalizers) > 0 {
		fs := make([]interface{}, len(m.Finalizers))
		for i, f := range m.Finalizers {
			fs[i] = f
		}
		out["finalizers"] = fs
	}
	return out, nil
}

func stringMap(m map[string]string) map[string]interface{} {
	out := make(map[string]interface{}, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
