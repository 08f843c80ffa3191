// Package objects reads the objects a decision needs (parents, the stored
// child, namespaces) from informer caches that start lazily, one per
// resource, the first time a decision asks for that resource. A cache miss
// falls back to a live GET, so a decision never waits for a cache to sync.
package objects

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
)

// Source says where an object came from.
type Source string

const (
	// FromCache means the informer cache answered; no round trip was made.
	FromCache Source = "cache"
	// FromLive means a live GET answered.
	FromLive Source = "live"
)

const (
	// DefaultMaxInformers bounds the caches a Store starts. Each one lists
	// and watches a whole resource cluster-wide; past the bound, reads of
	// further resources are live.
	DefaultMaxInformers = 128
	// discoveryResetInterval is the least time between two refreshes of
	// discovery that an unknown resource or kind triggers. A refresh is a
	// burst of requests; without a bound, any caller naming made-up
	// resources would make the proxy rediscover the cluster each time.
	discoveryResetInterval = 10 * time.Second
)

// uncached are resources never held in an informer cache: the proxy would
// keep every Secret of the cluster in memory to speed up writes of a few.
var uncached = map[schema.GroupResource]bool{{Resource: "secrets"}: true}

// Store reads objects by GVK or GVR.
type Store struct {
	dynamic      dynamic.Interface
	mapper       *restmapper.DeferredDiscoveryRESTMapper
	resync       time.Duration
	maxInformers int
	now          func() time.Time

	ctx       context.Context
	mu        sync.Mutex
	informers map[schema.GroupVersionResource]informers.GenericInformer
	lastReset time.Time
	observers []Observer
}

// Observer sees every object the caches hold as it changes, and the UIDs of
// objects that are deleted.
type Observer interface {
	Observe(obj *unstructured.Unstructured)
	Forget(uid types.UID)
}

// AddObserver registers o with every cache, present and future.
func (s *Store) AddObserver(o Observer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observers = append(s.observers, o)
	for _, inf := range s.informers {
		observe(inf, o)
	}
}

// observe registers o with inf.
func observe(inf informers.GenericInformer, o Observer) {
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				o.Observe(u)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				o.Observe(u)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				o.Forget(u.GetUID())
			}
		},
	})
}

// New returns a Store. Informers it starts run until ctx is done.
func New(ctx context.Context, disc discovery.DiscoveryInterface, dyn dynamic.Interface) *Store {
	return &Store{
		dynamic:      dyn,
		mapper:       restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
		maxInformers: DefaultMaxInformers,
		now:          time.Now,
		ctx:          ctx,
		informers:    map[schema.GroupVersionResource]informers.GenericInformer{},
	}
}

// RESTMapper is the store's discovery-backed mapper.
func (s *Store) RESTMapper() meta.RESTMapper { return s.mapper }

// Mapping resolves a kind to its resource and scope through discovery (no
// guessing plurals). An unknown kind refreshes discovery, at most once per
// discoveryResetInterval, since a CRD may have been installed since.
func (s *Store) Mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) && s.mayResetDiscovery() {
		m, err = s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	return m, err
}

// KindFor resolves a resource to its kind. Resource names match in any
// case, as discovery's mapper matches them; the caller compares with the
// canonical resource of the mapping when that matters.
func (s *Store) KindFor(gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	gvk, err := s.mapper.KindFor(gvr)
	if meta.IsNoMatchError(err) && s.mayResetDiscovery() {
		gvk, err = s.mapper.KindFor(gvr)
	}
	return gvk, err
}

// mayResetDiscovery refreshes discovery unless it was refreshed recently,
// and reports whether it did.
func (s *Store) mayResetDiscovery() bool {
	s.mu.Lock()
	now := s.now()
	if !s.lastReset.IsZero() && now.Sub(s.lastReset) < discoveryResetInterval {
		s.mu.Unlock()
		return false
	}
	s.lastReset = now
	s.mu.Unlock()
	s.mapper.Reset()
	return true
}

// GetKindShared reads namespace/name of kind gvk, like GetShared: the
// result must not be modified. For cluster-scoped kinds the namespace is
// ignored.
func (s *Store) GetKindShared(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, Source, error) {
	m, err := s.Mapping(gvk)
	if meta.IsNoMatchError(err) {
		// An ownerReference keeps the version it was written with
		// (apps/v1beta2, a CRD version since dropped); the object is the
		// same at any version the group serves for its kind.
		m, err = s.mapper.RESTMapping(gvk.GroupKind())
	}
	if err != nil {
		return nil, "", err
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		namespace = ""
	}
	return s.GetShared(ctx, m.Resource, namespace, name)
}

// Get reads namespace/name of resource gvr, from the cache when it has
// synced and holds the object, live otherwise. The returned object is a
// copy the caller may change.
func (s *Store) Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, Source, error) {
	return s.get(ctx, gvr, namespace, name, true)
}

// GetShared is Get without the copy of a cached object: the result may be
// the informer's own object and must not be modified. Decisions only read
// parents and namespaces, and copying them was a large share of a cache-hit
// write's garbage.
func (s *Store) GetShared(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, Source, error) {
	return s.get(ctx, gvr, namespace, name, false)
}

func (s *Store) get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, deepCopy bool) (*unstructured.Unstructured, Source, error) {
	inf := s.informerFor(gvr)
	//nolint:nestif // the cache-then-live-read fallback keeps its cases together
	if inf != nil && inf.Informer().HasSynced() {
		key := name
		if namespace != "" {
			key = namespace + "/" + name
		}
		obj, exists, err := inf.Informer().GetIndexer().GetByKey(key)
		if err == nil && exists {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				if deepCopy {
					u = u.DeepCopy()
				}
				return u, FromCache, nil
			}
		}
	}
	u, err := s.GetLive(ctx, gvr, namespace, name)
	return u, FromLive, err
}

// GetLive reads the object from the upstream, bypassing the cache.
func (s *Store) GetLive(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error) {
	var ri dynamic.ResourceInterface = s.dynamic.Resource(gvr)
	if namespace != "" {
		ri = s.dynamic.Resource(gvr).Namespace(namespace)
	}
	return ri.Get(ctx, name, metav1.GetOptions{})
}

// maxOwnedListed bounds a live list of owned objects, for the rare write
// that needs one before its cache has synced.
const maxOwnedListed = 1000

// Owned lists the objects of gvr in namespace whose controller is owner,
// from the cache when it has synced, else live (at most maxOwnedListed
// objects of the namespace are looked at). The objects are shared and must
// not be modified.
func (s *Store) Owned(ctx context.Context, gvr schema.GroupVersionResource, namespace string, owner types.UID) ([]*unstructured.Unstructured, error) {
	var all []*unstructured.Unstructured
	if inf := s.informerFor(gvr); inf != nil && inf.Informer().HasSynced() {
		objs, err := inf.Lister().ByNamespace(namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok {
				all = append(all, u)
			}
		}
	} else {
		list, err := s.dynamic.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{Limit: maxOwnedListed})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			all = append(all, &list.Items[i])
		}
	}
	var owned []*unstructured.Unstructured
	for _, u := range all {
		if ref := metav1.GetControllerOfNoCopy(u); ref != nil && ref.UID == owner {
			owned = append(owned, u)
		}
	}
	return owned, nil
}

// Synced reports whether the informer for gvr has synced (it is started if
// it was not). Resources that are never cached never sync.
func (s *Store) Synced(gvr schema.GroupVersionResource) bool {
	inf := s.informerFor(gvr)
	return inf != nil && inf.Informer().HasSynced()
}

// WaitForSync starts the informer for gvr and waits until it has synced or
// ctx is done.
func (s *Store) WaitForSync(ctx context.Context, gvr schema.GroupVersionResource) error {
	inf := s.informerFor(gvr)
	if inf == nil {
		return fmt.Errorf("%s is not cached: it is never cached, or the proxy holds %d caches already", gvr, s.maxInformers)
	}
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return fmt.Errorf("cache for %s did not sync: %w", gvr, ctx.Err())
	}
	return nil
}

// informerFor returns the cache of gvr, started on first use, or nil when
// gvr is never cached or the store holds its most caches already. gvr must
// be a canonical resource, as a RESTMapping names it: every spelling would
// otherwise be a cluster-wide cache of its own.
func (s *Store) informerFor(gvr schema.GroupVersionResource) informers.GenericInformer {
	if uncached[gvr.GroupResource()] {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if inf, ok := s.informers[gvr]; ok {
		return inf
	}
	if len(s.informers) >= s.maxInformers {
		return nil
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(s.dynamic, gvr, metav1.NamespaceAll, s.resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil)
	s.informers[gvr] = inf
	for _, o := range s.observers {
		observe(inf, o)
	}
	go inf.Informer().RunWithContext(s.ctx)
	return inf
}
