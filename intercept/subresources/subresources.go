// Package subresources says what the subresources of a resource are, where
// the write path depends on them: where its /scale keeps the replicas
// (.spec.replicas for the built-in kinds, a custom resource's
// specReplicasPath), whether its status is written through the object
// itself (a custom resource without a status subresource), and whether it
// is a custom resource at all (whose updates must name a
// resourceVersion). For custom
// resources it reads the CustomResourceDefinition with the proxy's
// credentials and remembers it for a while.
package subresources

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TTL is how long what is read from a CustomResourceDefinition is used
// before it is read again: a CRD whose subresources change is decided on
// the old ones for at most this long, and a kind written a thousand times
// a minute costs one read.
const TTL = time.Minute

// UnreadableError is a CustomResourceDefinition that could not be read.
type UnreadableError struct{ Err error }

func (e *UnreadableError) Error() string { return e.Err.Error() }
func (e *UnreadableError) Unwrap() error { return e.Err }

// Resolver remembers the subresources of each custom resource version. Its keys are canonical resources (the
// callers resolved them through discovery), so it holds at most one entry
// per served resource.
type Resolver struct {
	objects *objects.Store
	clock   clock.PassiveClock

	mu      sync.Mutex
	entries map[schema.GroupVersionResource]entry
}

type entry struct {
	path     string
	scalable bool
	// statusInObject: the version has no status subresource, so its
	// status is written with the object.
	statusInObject bool
	// custom: served from a CustomResourceDefinition.
	custom bool
	read   time.Time
}

// New returns a Resolver reading CustomResourceDefinitions through store.
func New(store *objects.Store, clk clock.PassiveClock) *Resolver {
	return &Resolver{objects: store, clock: clk, entries: map[schema.GroupVersionResource]entry{}}
}

// SpecReplicasPath is where the /scale of gvr writes, and whether gvr has
// a scale subresource at all. A CRD that cannot be read is an
// *UnreadableError; one whose scale subresource cannot be read is
// kube-apiserver's internal error.
func (r *Resolver) SpecReplicasPath(ctx context.Context, gvr schema.GroupVersionResource) (path string, scalable bool, err error) {
	e, err := r.lookup(ctx, gvr)
	return e.path, e.scalable, err
}

// StatusInObject reports whether the status of gvr is written through
// writes of the object itself: a custom resource version without a status
// subresource. The built-in kinds that report status, and the resources
// of aggregated API servers, have one. A CRD that cannot be read is an
// *UnreadableError.
func (r *Resolver) StatusInObject(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
	e, err := r.lookup(ctx, gvr)
	return e.statusInObject, err
}

// CustomResource reports whether gvr is served from a
// CustomResourceDefinition, rather than by kube-apiserver itself or by an
// aggregated API server. A CRD that cannot be read is an
// *UnreadableError.
func (r *Resolver) CustomResource(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
	e, err := r.lookup(ctx, gvr)
	return e.custom, err
}

func (r *Resolver) lookup(ctx context.Context, gvr schema.GroupVersionResource) (entry, error) {
	// A CRD's group must contain a dot: a group without one ("", apps,
	// policy) is kube-apiserver's own. A dotted group may be either, and
	// a CRD that is not found says it is not a CRD's.
	if !strings.Contains(gvr.Group, ".") {
		return entry{path: desired.DefaultSpecReplicasPath, scalable: true}, nil
	}
	now := r.clock.Now()
	r.mu.Lock()
	e, ok := r.entries[gvr]
	r.mu.Unlock()
	if ok && now.Sub(e.read) < TTL {
		return e, nil
	}
	crd, err := r.objects.GetLive(ctx, crdsGVR, "", gvr.Resource+"."+gvr.Group)
	switch {
	case apierrors.IsNotFound(err):
		// Served by kube-apiserver itself or by an aggregated API
		// server: the built-in convention.
		e = entry{path: desired.DefaultSpecReplicasPath, scalable: true}
	case err != nil:
		return entry{}, &UnreadableError{fmt.Errorf("reading the CustomResourceDefinition of %s: %w", gvr.GroupResource(), err)}
	default:
		path, scalable, err := desired.CRDSpecReplicasPath(crd, gvr.Version)
		if err != nil {
			return entry{}, apierrors.NewInternalError(err)
		}
		e = entry{path: path, scalable: scalable, statusInObject: !crdHasStatus(crd.Object, gvr.Version), custom: true}
	}
	e.read = now
	r.mu.Lock()
	r.entries[gvr] = e
	r.mu.Unlock()
	return e, nil
}

// crdHasStatus reports whether version of the CustomResourceDefinition crd
// has a status subresource. A version the CRD does not list counts as
// having one: nothing is written through it.
func crdHasStatus(crd map[string]any, version string) bool {
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok || m["name"] != version {
			continue
		}
		_, has, _ := unstructured.NestedFieldNoCopy(m, "subresources", "status")
		return has
	}
	return true
}
