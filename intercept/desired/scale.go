package desired

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// DefaultSpecReplicasPath is where built-in scalable kinds (Deployment,
// ReplicaSet, StatefulSet, ReplicationController) keep their replicas.
const DefaultSpecReplicasPath = ".spec.replicas"

// ScaleToSpec turns a write to the /scale subresource into the write it
// amounts to on the target object: a copy of target with spec.replicas set to
// the Scale's spec.replicas. Diff(target, result) then reports
// "spec.replicas: 3 → 5". target may be nil (only spec.replicas is set
// then). scale is the effective Scale (the request body of a PUT, or the
// result of applying a PATCH to ScaleFromTarget(target)); an absent
// spec.replicas means 0, as in autoscaling/v1. Errors are 400s.
func ScaleToSpec(scale, target *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	return ScaleToPath(scale, target, DefaultSpecReplicasPath)
}

// ScaleToPath is ScaleToSpec for a custom resource whose scale subresource
// keeps replicas at specReplicasPath (the CRD's
// subresources.scale.specReplicasPath, e.g. ".spec.size").
func ScaleToPath(scale, target *unstructured.Unstructured, specReplicasPath string) (*unstructured.Unstructured, error) {
	if scale == nil {
		return nil, apierrors.NewBadRequest("the scale request has no body")
	}
	if k := scale.GetKind(); k != "Scale" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the body of a scale request must be a Scale, got %q", k))
	}
	fields, err := parsePath(specReplicasPath)
	if err != nil {
		return nil, err
	}
	replicas, found, err := unstructured.NestedFieldNoCopy(scale.Object, "spec", "replicas")
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the Scale's spec is not an object: %v", err))
	}
	var n int64
	if found && replicas != nil {
		switch r := replicas.(type) {
		case int64:
			n = r
		case float64:
			if r != float64(int64(r)) {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("the Scale's spec.replicas must be an integer, got %v", r))
			}
			n = int64(r)
		default:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the Scale's spec.replicas must be an integer, got %s", Render(replicas)))
		}
	}
	var out *unstructured.Unstructured
	if target != nil {
		out = target.DeepCopy()
	} else {
		out = &unstructured.Unstructured{Object: map[string]interface{}{}}
	}
	if err := unstructured.SetNestedField(out.Object, n, fields...); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot set %s on the target object: %v", specReplicasPath, err))
	}
	return out, nil
}

// ScaleFromTarget builds the autoscaling/v1 Scale the apiserver would serve
// for target, so that a PATCH to /scale can be applied to it (with the patch
// package) before ScaleToPath. specReplicasPath "" means
// DefaultSpecReplicasPath. Like the apiserver, it carries the managedFields
// entries of the managers that own the replicas field in target (translated
// with managedfields.ScaleHandler), so a server-side apply to /scale sees the
// same owners and conflicts. The selector and status are not filled in; they
// do not matter for the desired state.
func ScaleFromTarget(target *unstructured.Unstructured, specReplicasPath string) (*unstructured.Unstructured, error) {
	if specReplicasPath == "" {
		specReplicasPath = DefaultSpecReplicasPath
	}
	fields, err := parsePath(specReplicasPath)
	if err != nil {
		return nil, err
	}
	meta := map[string]interface{}{"name": target.GetName()}
	if ns := target.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	if uid := target.GetUID(); uid != "" {
		meta["uid"] = string(uid)
	}
	if rv := target.GetResourceVersion(); rv != "" {
		meta["resourceVersion"] = rv
	}
	mapping := managedfields.ResourcePathMappings{target.GetAPIVersion(): fieldpath.MakePathOrDie(toInterfaces(fields)...)}
	if entries, err := managedfields.NewScaleHandler(target.GetManagedFields(), target.GroupVersionKind().GroupVersion(), mapping).ToSubresource(); err == nil && len(entries) > 0 {
		scaleMeta := &unstructured.Unstructured{Object: map[string]interface{}{"metadata": meta}}
		scaleMeta.SetManagedFields(entries)
	}
	spec := map[string]interface{}{}
	if v, found, _ := unstructured.NestedFieldNoCopy(target.Object, fields...); found && v != nil {
		spec["replicas"] = v
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "autoscaling/v1",
		"kind":       "Scale",
		"metadata":   meta,
		"spec":       spec,
	}}, nil
}

func toInterfaces(fields []string) []interface{} {
	out := make([]interface{}, len(fields))
	for i, f := range fields {
		out[i] = f
	}
	return out
}

// parsePath parses a CRD specReplicasPath (".spec.replicas").
func parsePath(p string) ([]string, error) {
	if !strings.HasPrefix(p, ".") || strings.ContainsAny(p, "[]") || strings.Contains(p, "..") || strings.HasSuffix(p, ".") {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("unsupported replicas path %q: expected a dotted path such as .spec.replicas", p))
	}
	return strings.Split(p[1:], "."), nil
}

// CRDSpecReplicasPath reads, from a CustomResourceDefinition (as an
// unstructured apiextensions.k8s.io/v1 object), where the scale subresource
// of version keeps its replicas. scalable is false when that version is not
// served with a scale subresource (kube-apiserver then serves no /scale).
// Each version has its own subresources, so the version of the request
// decides, not the storage version.
func CRDSpecReplicasPath(crd *unstructured.Unstructured, version string) (path string, scalable bool, err error) {
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		return "", false, fmt.Errorf("CustomResourceDefinition %s: spec.versions: %w", crd.GetName(), err)
	}
	for _, v := range versions {
		m, ok := v.(map[string]interface{})
		if !ok || m["name"] != version {
			continue
		}
		scale, found, err := unstructured.NestedMap(m, "subresources", "scale")
		if err != nil {
			return "", false, fmt.Errorf("CustomResourceDefinition %s version %s: subresources.scale: %w", crd.GetName(), version, err)
		}
		if !found || scale == nil {
			return "", false, nil
		}
		p, _ := scale["specReplicasPath"].(string)
		if p == "" {
			return "", false, fmt.Errorf("CustomResourceDefinition %s version %s: the scale subresource has no specReplicasPath", crd.GetName(), version)
		}
		if _, err := parsePath(p); err != nil {
			return "", false, err
		}
		return p, true, nil
	}
	return "", false, nil
}
