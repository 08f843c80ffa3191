// /scale writes: decided as writes of the scaled object's replicas field,
// which a custom resource names in its CustomResourceDefinition, and traced
// on the scaled object after they succeeded.

package intercept

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
)

var (
	scaleKind = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	crdsGVR   = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// replicaPathTTL is how long the replicas path read from a
// CustomResourceDefinition is used before it is read again: a CRD whose
// scale subresource moves is decided on the old field for at most this
// long, and a kind scaled a thousand times a minute costs one read.
const replicaPathTTL = time.Minute

// scaledObject turns a /scale write into the write of the replicas field on
// the scaled object it amounts to (HPA and kubectl scale become spec
// writes). A PATCH applies to the Scale the apiserver would serve for the
// stored object, owners of the replicas field included, so apply conflicts
// match.
func (i *Interceptor) scaledObject(ctx context.Context, f *facts) (*unstructured.Unstructured, error) {
	wr := f.req.w
	path, err := i.specReplicasPath(ctx, wr.gvr)
	if err != nil {
		return nil, err
	}
	scale := f.sent
	if wr.verb == "patch" {
		current, err := desired.ScaleFromTarget(f.old, path)
		if err != nil {
			return nil, err
		}
		ns := f.namespace
		scale, err = patch.Apply(f.patchType, current, f.data, patch.Options{FieldManager: wr.fieldManager, Kind: scaleKind, Name: wr.info.Name, Namespace: &ns})
		if err != nil {
			return nil, err
		}
	}
	return desired.ScaleToPath(scale, f.old, path)
}

// replicaPaths remembers where the scale subresource of each custom
// resource version keeps its replicas. The zero value is ready to use. Its
// keys are canonical resources (load resolved them through discovery), so
// it holds at most one entry per served resource.
type replicaPaths struct {
	mu      sync.Mutex
	entries map[schema.GroupVersionResource]replicaPath
}

type replicaPath struct {
	path     string
	scalable bool
	read     time.Time
}

// specReplicasPath is where the /scale of gvr writes: .spec.replicas for
// the built-in kinds, and for a custom resource its CRD's
// subresources.scale.specReplicasPath, read with the proxy's credentials.
// A resource without a scale subresource is kube-apiserver's 404.
func (i *Interceptor) specReplicasPath(ctx context.Context, gvr schema.GroupVersionResource) (string, error) {
	// A CRD's group must contain a dot; every built-in scalable kind lives
	// in a group without one ("", apps).
	if !strings.Contains(gvr.Group, ".") {
		return desired.DefaultSpecReplicasPath, nil
	}
	c := &i.scalePaths
	now := i.cfg.Clock.Now()
	c.mu.Lock()
	e, ok := c.entries[gvr]
	c.mu.Unlock()
	if !ok || now.Sub(e.read) >= replicaPathTTL {
		crd, err := i.cfg.Objects.GetLive(ctx, crdsGVR, "", gvr.Resource+"."+gvr.Group)
		switch {
		case apierrors.IsNotFound(err):
			// Served by kube-apiserver itself or by an aggregated API
			// server: the built-in convention.
			e = replicaPath{path: desired.DefaultSpecReplicasPath, scalable: true}
		case err != nil:
			return "", i.unresolvable(fmt.Errorf("reading the CustomResourceDefinition of %s: %w", gvr.GroupResource(), err))
		default:
			path, scalable, err := desired.CRDSpecReplicasPath(crd, gvr.Version)
			if err != nil {
				return "", apierrors.NewInternalError(err)
			}
			e = replicaPath{path: path, scalable: scalable}
		}
		e.read = now
		c.mu.Lock()
		if c.entries == nil {
			c.entries = map[schema.GroupVersionResource]replicaPath{}
		}
		c.entries[gvr] = e
		c.mu.Unlock()
	}
	if !e.scalable {
		return "", resourceNotFound()
	}
	return e.path, nil
}

// traceScaled records, after a /scale write succeeded, the annotations the
// decision gives the scaled object (its trace and updaters). A Scale body
// has no room for them and kube-apiserver keeps only the replicas of it, so
// they are written in a follow-up patch with the proxy's credentials. It
// runs in the background: the caller's write is done.
func (i *Interceptor) traceScaled(f *facts, d *decision.Decision) {
	if f.req.w.sub != scaleSubresource || d.ChildAnnotations.Empty() || f.new == nil {
		return
	}
	changes := *d.ChildAnnotations
	gvr, ns, name, scaled := f.req.w.gvr, f.namespace, f.req.w.info.Name, f.new
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), i.cfg.SideWriteTimeout)
		defer cancel()
		if err := i.annotateScaled(ctx, gvr, ns, name, scaled, changes); err != nil {
			i.cfg.Log.Warn("recording the trace of a /scale write failed", zap.String("resource", gvr.String()),
				zap.String("namespace", ns), zap.String("name", name), zap.Error(err))
		}
	}()
}

// annotateScaled writes changes to the scaled object while its desired
// state is still the one the /scale write produced (scaled), under a
// resourceVersion precondition. Once a later write has changed the desired
// state, that write carries the trace, and this one is dropped rather than
// put over it.
func (i *Interceptor) annotateScaled(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, scaled *unstructured.Unstructured, changes decision.AnnotationChanges) error {
	var ri dynamic.ResourceInterface = i.cfg.Writer.Resource(gvr)
	if ns != "" {
		ri = i.cfg.Writer.Resource(gvr).Namespace(ns)
	}
	for attempt := 1; ; attempt++ {
		fresh, err := i.cfg.Objects.GetLive(ctx, gvr, ns, name)
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
		data, err := annotationPatch(set, fresh.GetResourceVersion())
		if err != nil {
			return err
		}
		_, err = ri.Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager})
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
