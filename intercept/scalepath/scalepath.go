// Package scalepath says where the /scale subresource of a resource keeps
// its replicas: .spec.replicas for the built-in kinds, and for a custom
// resource its CustomResourceDefinition's specReplicasPath, read with the
// proxy's credentials and remembered for a while.
package scalepath

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TTL is how long the replicas path read from a CustomResourceDefinition
// is used before it is read again: a CRD whose scale subresource moves is
// decided on the old field for at most this long, and a kind scaled a
// thousand times a minute costs one read.
const TTL = time.Minute

// UnreadableError is a CustomResourceDefinition that could not be read.
type UnreadableError struct{ Err error }

func (e *UnreadableError) Error() string { return e.Err.Error() }
func (e *UnreadableError) Unwrap() error { return e.Err }

// Resolver remembers where the scale subresource of each custom resource
// version keeps its replicas. Its keys are canonical resources (the
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
	read     time.Time
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
	// A CRD's group must contain a dot; every built-in scalable kind lives
	// in a group without one ("", apps).
	if !strings.Contains(gvr.Group, ".") {
		return desired.DefaultSpecReplicasPath, true, nil
	}
	now := r.clock.Now()
	r.mu.Lock()
	e, ok := r.entries[gvr]
	r.mu.Unlock()
	if ok && now.Sub(e.read) < TTL {
		return e.path, e.scalable, nil
	}
	crd, err := r.objects.GetLive(ctx, crdsGVR, "", gvr.Resource+"."+gvr.Group)
	switch {
	case apierrors.IsNotFound(err):
		// Served by kube-apiserver itself or by an aggregated API
		// server: the built-in convention.
		e = entry{path: desired.DefaultSpecReplicasPath, scalable: true}
	case err != nil:
		return "", false, &UnreadableError{fmt.Errorf("reading the CustomResourceDefinition of %s: %w", gvr.GroupResource(), err)}
	default:
		path, scalable, err := desired.CRDSpecReplicasPath(crd, gvr.Version)
		if err != nil {
			return "", false, apierrors.NewInternalError(err)
		}
		e = entry{path: path, scalable: scalable}
	}
	e.read = now
	r.mu.Lock()
	r.entries[gvr] = e
	r.mu.Unlock()
	return e.path, e.scalable, nil
}
