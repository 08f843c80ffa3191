package sidewrites

import (
	"context"
	"encoding/json"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// Writer writes to the objects decisions name, with the proxy's
// credentials.
type Writer struct {
	// Objects maps kinds to resources and reads objects live.
	Objects *objects.Store
	Dynamic dynamic.Interface
	// FieldManager owns the writes.
	FieldManager string
	Log          *zap.Logger
	// Timeout bounds each write made after the write it follows was
	// answered.
	Timeout time.Duration
}

// ResourceFor maps a reference to its resource client.
func (w *Writer) ResourceFor(ref decision.ObjectRef) (dynamic.ResourceInterface, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, err
	}
	m, err := w.Objects.Mapping(gv.WithKind(ref.Kind))
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		return w.Dynamic.Resource(m.Resource), nil
	}
	return w.Dynamic.Resource(m.Resource).Namespace(ref.Namespace), nil
}

// AnnotationPatch is a merge patch of metadata.annotations, with an
// optional resourceVersion precondition (the apiserver answers 409 when the
// object changed since).
func AnnotationPatch(set map[string]*string, resourceVersion string) ([]byte, error) {
	md := map[string]any{"annotations": set}
	if resourceVersion != "" {
		md["resourceVersion"] = resourceVersion
	}
	return json.Marshal(map[string]any{"metadata": md})
}

// maxSideWriteAttempts bounds the rebase loop of one side write.
const maxSideWriteAttempts = 5

// Apply writes sw to its target from fresh state, under a resourceVersion
// precondition: a person's edit that lands in between is rebased on,
// never overwritten. A write that names its target's uid is made only on
// that object.
func (w *Writer) Apply(ctx context.Context, sw decision.SideWrite) error {
	ri, err := w.ResourceFor(sw.Target)
	if err != nil {
		return err
	}
	read := func() (*unstructured.Unstructured, error) { return ri.Get(ctx, sw.Target.Name, metav1.GetOptions{}) }
	return w.rebaseAnnotations(ctx, ri, sw.Target.Name, read, func(fresh *unstructured.Unstructured) map[string]*string {
		return changesOn(sw, fresh)
	})
}

// changesOn is the annotation patch that carries out sw on fresh.
func changesOn(sw decision.SideWrite, fresh *unstructured.Unstructured) map[string]*string {
	if sw.TargetUID != "" && fresh.GetUID() != sw.TargetUID {
		// Deleted and created again since: the write was about the object
		// that is gone.
		return nil
	}
	changes := sw.RebaseOn(fresh)
	return changes.Pointers()
}

// rebaseAnnotations writes the annotations patch computes from fresh state
// (nil removes a key) under a resourceVersion precondition, and on a
// conflict reads and computes again, at most maxSideWriteAttempts times.
// read returns the fresh object, or nil when there is nothing left to
// write to; an object gone, or a patch with nothing in it, ends the write.
func (w *Writer) rebaseAnnotations(ctx context.Context, ri dynamic.ResourceInterface, name string,
	read func() (*unstructured.Unstructured, error), patch func(fresh *unstructured.Unstructured) map[string]*string) error {
	for attempt := 1; ; attempt++ {
		fresh, err := read()
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if fresh == nil {
			return nil
		}
		set := patch(fresh)
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
