package escalation

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// ParentEditor edits a parent's annotations: it reads the parent, lets
// compute derive the edit from what it read, and writes it unless the edit
// is Unchanged. Should the parent change in between, it must read again and
// recompute (so that a concurrent edit of the same annotation is never
// lost), and compute may be called more than once. An error of compute is
// returned and nothing is written.
type ParentEditor interface {
	Edit(ctx context.Context, parent decision.ObjectRef, compute func(obj *unstructured.Unstructured) (annotations.Edit, error)) error
}

// FieldManager is the field manager of the edits of DynamicParentEditor.
const FieldManager = "kausality-escalation"

// DynamicParentEditor is a ParentEditor over the dynamic client: get,
// compute, and a merge patch of the changed annotations with the read
// resourceVersion as precondition; on a conflict all three again. A patch
// (not an update) is what the proxy's RBAC grants on parents, and it
// leaves every annotation and field the edit does not name as it is.
type DynamicParentEditor struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// NewDynamicParentEditor returns a ParentEditor writing through dyn; mapper
// resolves kinds to resources.
func NewDynamicParentEditor(dyn dynamic.Interface, mapper meta.RESTMapper) *DynamicParentEditor {
	return &DynamicParentEditor{dyn: dyn, mapper: mapper}
}

var _ ParentEditor = (*DynamicParentEditor)(nil)

// Edit implements ParentEditor.
func (d *DynamicParentEditor) Edit(ctx context.Context, parent decision.ObjectRef, compute func(obj *unstructured.Unstructured) (annotations.Edit, error)) error {
	gv, err := schema.ParseGroupVersion(parent.APIVersion)
	if err != nil {
		return fmt.Errorf("parent %s: %w", parent, err)
	}
	mapping, err := d.mapper.RESTMapping(gv.WithKind(parent.Kind).GroupKind(), gv.Version)
	if err != nil {
		return fmt.Errorf("parent %s: %w", parent, err)
	}
	var client dynamic.ResourceInterface = d.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		client = d.dyn.Resource(mapping.Resource).Namespace(parent.Namespace)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := client.Get(ctx, parent.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit, err := compute(obj)
		if err != nil || edit.Unchanged {
			return err
		}
		patch, err := annotationPatch(edit, obj.GetResourceVersion())
		if err != nil {
			return err
		}
		_, err = client.Patch(ctx, parent.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		return err
	})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("parent %s kept changing; nothing was written: %w", parent, err)
	}
	return err
}

// annotationPatch is the merge patch of edit: the annotations it sets, a
// null for each it removes, and the resourceVersion the edit was computed
// from, so that the apiserver answers 409 if anyone wrote in between.
func annotationPatch(edit annotations.Edit, resourceVersion string) ([]byte, error) {
	ann := make(map[string]any, len(edit.Set)+len(edit.Remove))
	for _, k := range edit.Remove {
		ann[k] = nil
	}
	for k, v := range edit.Set {
		ann[k] = v
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": resourceVersion, "annotations": ann}})
}
