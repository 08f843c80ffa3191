package sidewrites

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	var ri dynamic.ResourceInterface = w.Dynamic.Resource(gvr)
	if ns != "" {
		ri = w.Dynamic.Resource(gvr).Namespace(ns)
	}
	for attempt := 1; ; attempt++ {
		fresh, err := w.Objects.GetLive(ctx, gvr, ns, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if fresh.GetUID() != scaled.GetUID() {
			return nil
		}
		if moved, _ := desired.Changed(scaled, fresh); moved {
			return nil
		}
		set := scaleTracePatch(fresh.GetAnnotations(), changes)
		if len(set) == 0 {
			return nil
		}
		data, err := AnnotationPatch(set, fresh.GetResourceVersion())
		if err != nil {
			return err
		}
		_, err = ri.Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: w.FieldManager})
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= maxSideWriteAttempts {
			return err
		}
	}
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
