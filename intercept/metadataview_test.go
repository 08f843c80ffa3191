package intercept_test

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
)

// metadataView serves the metadata of the objects a dynamic fake holds, as
// kube-apiserver serves the metadata of the objects it stores: one store,
// so that the cache of children sees the writes the fake records.
type metadataView struct{ dyn dynamic.Interface }

// IsWatchListSemanticsUnSupported tells the informers, as the dynamic fake
// does, that a watch sends no initial events: they list first.
func (v metadataView) IsWatchListSemanticsUnSupported() bool { return true }

func (v metadataView) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return metadataResource{dyn: v.dyn, gvr: gvr, ri: v.dyn.Resource(gvr)}
}

type metadataResource struct {
	dyn dynamic.Interface
	gvr schema.GroupVersionResource
	ri  dynamic.ResourceInterface
}

var errMetadataViewReadOnly = errors.New("the metadata view of the fake is read-only")

func (r metadataResource) Namespace(ns string) metadata.ResourceInterface {
	return metadataResource{dyn: r.dyn, gvr: r.gvr, ri: r.dyn.Resource(r.gvr).Namespace(ns)}
}

func (r metadataResource) Delete(context.Context, string, metav1.DeleteOptions, ...string) error {
	return errMetadataViewReadOnly
}

func (r metadataResource) DeleteCollection(context.Context, metav1.DeleteOptions, metav1.ListOptions) error {
	return errMetadataViewReadOnly
}

func (r metadataResource) Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*metav1.PartialObjectMetadata, error) {
	return nil, errMetadataViewReadOnly
}

func (r metadataResource) Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	u, err := r.ri.Get(ctx, name, opts, sub...)
	if err != nil {
		return nil, err
	}
	return partialOf(u)
}

func (r metadataResource) List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	list, err := r.ri.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: list.GetResourceVersion()}}
	for i := range list.Items {
		m, err := partialOf(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *m)
	}
	return out, nil
}

func (r metadataResource) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := r.ri.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if u, ok := e.Object.(*unstructured.Unstructured); ok {
			if m, err := partialOf(u); err == nil {
				e.Object = m
			}
		}
		return e, true
	}), nil
}

func partialOf(u *unstructured.Unstructured) (*metav1.PartialObjectMetadata, error) {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}}
	md, _ := u.Object["metadata"].(map[string]interface{})
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(md, &m.ObjectMeta); err != nil {
		return nil, err
	}
	return m, nil
}
