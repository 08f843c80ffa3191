package sidewrites

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// AnnotateScaled writes changes to the scaled object while its desired
// state is still the one the /scale write produced (scaled), under a
// resourceVersion precondition. Once a later write has changed the desired
// state, that write carries the trace, and this one is dropped rather than
// put over it.
func (w *Writer) AnnotateScaled(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, scaled *unstructured.Unstructured, changes decision.AnnotationChanges) error {
	read := func() (*unstructured.Unstructured, error) {
		fresh, err := w.Objects.GetLive(ctx, gvr, ns, name)
		if err != nil || fresh.GetUID() != scaled.GetUID() {
			return nil, err
		}
		if moved, _ := desired.Changed(scaled, fresh); moved {
			return nil, nil
		}
		return fresh, nil
	}
	return w.rebaseAnnotations(ctx, w.resource(gvr, ns), name, read, func(fresh *unstructured.Unstructured) map[string]*string {
		return scaleTracePatch(fresh.GetAnnotations(), changes)
	})
}

// scaleTracePatch is the part of changes that current does not have yet,
// in the form of a merge patch of annotations (nil removes).
func scaleTracePatch(current map[string]string, changes decision.AnnotationChanges) map[string]*string {
	set := map[string]*string{}
	for k, v := range changes.Set {
		if current[k] != v {
			set[k] = &v
		}
	}
	for _, k := range changes.Remove {
		if _, ok := current[k]; ok {
			set[k] = nil
		}
	}
	return set
}

// AnnotateAt writes changes to the object at resourceVersion, and returns
// the object as kube-apiserver stored it. It reads nothing first: the
// precondition is the state the write was decided on, and a conflict (the
// object moved since) is the caller's to decide again.
func (w *Writer) AnnotateAt(ctx context.Context, gvr schema.GroupVersionResource, ns, name, resourceVersion string, changes decision.AnnotationChanges) (*unstructured.Unstructured, error) {
	data, err := AnnotationPatch(changes.Pointers(), resourceVersion)
	if err != nil {
		return nil, err
	}
	return w.resource(gvr, ns).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: w.FieldManager})
}

// Restore puts back the annotations written (with AnnotateAt) ahead of a
// write that then failed, to their values in before, from fresh state
// under a resourceVersion precondition. A key that no longer holds what
// was written has been written since, and is left as it is.
func (w *Writer) Restore(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, uid types.UID, written decision.AnnotationChanges, before map[string]string) error {
	read := func() (*unstructured.Unstructured, error) {
		fresh, err := w.Objects.GetLive(ctx, gvr, ns, name)
		if err != nil || fresh.GetUID() != uid {
			return nil, err
		}
		return fresh, nil
	}
	return w.rebaseAnnotations(ctx, w.resource(gvr, ns), name, read, func(fresh *unstructured.Unstructured) map[string]*string {
		return restorePatch(fresh.GetAnnotations(), written, before)
	})
}

// restorePatch is the merge patch of annotations (nil removes) that puts
// the keys of written that still hold what was written back to before.
func restorePatch(current map[string]string, written decision.AnnotationChanges, before map[string]string) map[string]*string {
	set := map[string]*string{}
	back := func(k string) {
		if v, ok := before[k]; ok {
			set[k] = &v
		} else {
			set[k] = nil
		}
	}
	for k, v := range written.Set {
		if cur, ok := current[k]; ok && cur == v {
			back(k)
		}
	}
	for _, k := range written.Remove {
		if _, ok := current[k]; !ok {
			if _, had := before[k]; had {
				back(k)
			}
		}
	}
	return set
}

func (w *Writer) resource(gvr schema.GroupVersionResource, ns string) dynamic.ResourceInterface {
	if ns == "" {
		return w.Dynamic.Resource(gvr)
	}
	return w.Dynamic.Resource(gvr).Namespace(ns)
}
