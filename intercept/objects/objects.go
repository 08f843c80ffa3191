// Package objects reads the objects a decision needs (parents, the stored
// child, namespaces) from caches that start lazily, one per
// resource, the first time a decision asks for that resource. A cache miss
// falls back to a live GET, so a decision never waits for a cache to sync.
// Parents are cached only of the resources admitted (AdmitParents): any
// caller can name an object of any kind as the controller of what it
// writes, and a cache of that kind would hold every object of it in the
// cluster.
//
// What is cached follows what decisions read, not what the cluster holds.
// Parents are cached whole but without managedFields, which are often half
// of an object and which no decision reads, and as JSON rather than as a
// tree of maps: the parents writes are decided under are decoded when read,
// the latest few kept decoded. Children, the far larger
// population (every Pod, every ConfigMap), are cached as metadata only,
// listed and watched in protobuf and kept as protobuf bytes, which the
// garbage collector does not scan: ownerReferences, annotations,
// resourceVersion and generation are what most writes are decided on. The
// full stored child is read live by the few decisions that depend on it.
//
// Most watch events the proxy receives are of objects it never decides
// about, so a watch event must cost little: the caches watch over HTTP/1.1
// connections of their own (CachesOver), and a child's event is copied
// from its protobuf into the compact form the cache keeps, never decoded;
// a parent's is decoded in one pass, envelope and object together. The
// goroutine that reads an event writes it into the cache and tells the
// observers, with no informer's queues in between.
package objects

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Source says where an object came from.
type Source string

const (
	// FromCache means a cache answered; no round trip was made.
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

// namespacesResource is cached from the start: every write into a
// namespace reads its modes.
var namespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// uncached are resources never held in a cache: the proxy would
// keep every Secret of the cluster in memory to speed up writes of a few.
var uncached = map[schema.GroupResource]bool{{Resource: "secrets"}: true}

// Store reads objects by GVK or GVR.
type Store struct {
	dynamic dynamic.Interface
	// cacheDynamic and cacheMetadata list and watch for the caches.
	cacheDynamic  dynamic.Interface
	cacheMetadata metadata.Interface
	// childWatch, when set, watches children decoded as compactChild;
	// parentWatch parents decoded as compactParent.
	childWatch, parentWatch rest.Interface
	// typedParents says which parents may be watched in protobuf, as
	// their kind's Go type, and protobufServed whether kube-apiserver
	// serves them so now (typedparent.go).
	typedParents   func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool)
	protobufServed func() bool
	mapper         *restmapper.DeferredDiscoveryRESTMapper
	// discovery is the cached discovery the mapper reads.
	discovery    discovery.CachedDiscoveryInterface
	memo         *mappingMemo
	parents      *parentMemo
	maxInformers int
	now          func() time.Time

	ctx context.Context
	mu  sync.Mutex
	// parentCaches are the caches of parents, childCaches those of
	// children: metadata only.
	parentCaches, childCaches map[schema.GroupVersionResource]*objectCache
	// admitted are the resources whose parents may be cached
	// (AdmitParents); a parent of any other resource is read live.
	admitted  map[schema.GroupVersionResource]bool
	lastReset time.Time
	// observers is read on every watch event, without the lock.
	observers atomic.Pointer[[]Observer]

	// excluded are the namespaces whose writes nobody decides about
	// (ExcludingNamespaces); the caches of children of namespaced
	// resources leave out listedExcluded, what it said when last read.
	excluded       func() []string
	listedExcluded []string
	// namespaced says whether gvr's objects live in namespaces.
	namespaced func(gvr schema.GroupVersionResource) bool
}

// Observer sees every parent the caches hold as it changes, and the UIDs of
// objects that are deleted, parents and children.
type Observer interface {
	Observe(obj *unstructured.Unstructured)
	Forget(uid types.UID)
}

// MetadataObserver is an Observer that also hears of every change to a
// cached child, and needs no more than metadata of a parent either. It
// gets the child's metadata only: that is all the cache holds of it; and
// of a parent, its identity (kind, name, namespace, UID, resourceVersion).
type MetadataObserver interface {
	Observer
	ObserveMetadata(obj metav1.Object)
}

// AddObserver registers o with every cache, present and future. Whole
// objects reach it only from the caches of parents: what is learned from
// an object (its settledness) is learned from parent kinds only, and a
// child's watch event costs no more than a metadata update. A parent is
// decoded for o only when o needs more than its metadata (MetadataObserver)
// and learns from its kind (KindFilter). A cache started before o hears
// of what it holds now, as a new handler of an informer would.
func (s *Store) AddObserver(o Observer) {
	s.mu.Lock()
	next := append(slices.Clone(s.observersNow()), o)
	s.observers.Store(&next)
	var parents, children []cache.Store
	for _, c := range s.parentCaches {
		parents = append(parents, c.indexer)
	}
	for _, c := range s.childCaches {
		children = append(children, c.indexer)
	}
	s.mu.Unlock()
	only := []Observer{o}
	for _, st := range parents {
		for _, obj := range st.List() {
			parentChanged(only, obj, nil)
		}
	}
	for _, st := range children {
		for _, obj := range st.List() {
			childChanged(only, obj, nil)
		}
	}
}

func (s *Store) observersNow() []Observer {
	if os := s.observers.Load(); os != nil {
		return *os
	}
	return nil
}

// childChanged tells observers of a change to a cached child: only those
// that hear of children (MetadataObserver), with its identity.
func childChanged(observers []Observer, obj interface{}, _ *watchDecoded) {
	c, ok := cachedChild(obj)
	if !ok {
		return
	}
	for _, o := range observers {
		if mo, ok := o.(MetadataObserver); ok {
			mo.ObserveMetadata(c)
		}
	}
}

// KindFilter is an Observer that learns from some kinds of parent only:
// a parent of another kind is not decoded for it.
type KindFilter interface {
	Learns(gk schema.GroupKind) bool
}

// StatusObserver is an Observer that needs a parent's whole spec only
// now and then (settledness hashes a spec once per generation), and its
// status only when it changed.
type StatusObserver interface {
	Observer
	// ObserveStatus is Observe of the parent of kind gk that identity
	// names (namespace, name, UID, resourceVersion, generation). status
	// gives it, its pod templates possibly left out; whole gives it whole;
	// either is nil when it cannot be decoded. statusKey, when not empty,
	// is equal for two versions of a parent only if their generation,
	// deletion, annotations, spec and status are.
	ObserveStatus(identity metav1.Object, gk schema.GroupKind, statusKey string, status, whole func() *unstructured.Unstructured)
}

// parentChanged tells observers of a change to a cached parent. An
// observer satisfied with metadata (MetadataObserver) gets its identity;
// any other the parent decoded, once for all of them (decoded, when the
// watch has decoded it already), unless it says it does not learn from
// its kind; a StatusObserver gets it without its pod templates when it
// was watched in protobuf, whole when it asks, and nothing decoded when
// its status key says nothing it reads changed.
func parentChanged(observers []Observer, obj interface{}, decoded *watchDecoded) {
	p, ok := cachedParentObject(obj)
	if !ok {
		return
	}
	var identity metav1.Object
	var whole, status *unstructured.Unstructured
	var key string
	keyed := false
	wholeOf := func() *unstructured.Unstructured {
		if whole != nil {
			return whole
		}
		if decoded != nil {
			whole, _ = decoded.whole()
		}
		if whole == nil {
			whole, _ = p.object()
		}
		return whole
	}
	statusOf := func() *unstructured.Unstructured {
		if status == nil && decoded != nil {
			status, _ = decoded.status()
		}
		if status == nil {
			return wholeOf()
		}
		return status
	}
	for _, o := range observers {
		if mo, ok := o.(MetadataObserver); ok {
			if identity == nil {
				identity = p.GetObjectMeta()
			}
			mo.ObserveMetadata(identity)
			continue
		}
		if f, ok := o.(KindFilter); ok && !f.Learns(p.groupKind()) {
			continue
		}
		if so, ok := o.(StatusObserver); ok {
			if identity == nil {
				identity = p.GetObjectMeta()
			}
			if !keyed && decoded != nil {
				key, keyed = decoded.statusKey(), true
			}
			so.ObserveStatus(identity, p.groupKind(), key, statusOf, wholeOf)
			continue
		}
		if wholeOf() == nil {
			return
		}
		o.Observe(whole)
	}
}

// New returns a Store. Caches it starts run until ctx is done. meta
// should speak protobuf (metadata.NewForConfig does): children are listed
// and watched through it, and decoding JSON was most of a watch event's CPU.
func New(ctx context.Context, disc discovery.DiscoveryInterface, dyn dynamic.Interface, meta metadata.Interface, opts ...Option) *Store {
	s := &Store{
		dynamic:       dyn,
		cacheDynamic:  dyn,
		cacheMetadata: meta,
		discovery:     memory.NewMemCacheClient(disc),
		memo:          newMappingMemo(),
		parents:       newParentMemo(),
		maxInformers:  DefaultMaxInformers,
		now:           time.Now,
		ctx:           ctx,
		parentCaches:  map[schema.GroupVersionResource]*objectCache{},
		childCaches:   map[schema.GroupVersionResource]*objectCache{},
		admitted:      map[schema.GroupVersionResource]bool{namespacesResource: true},
	}
	s.mapper = restmapper.NewDeferredDiscoveryRESTMapper(s.discovery)
	s.namespaced = s.namespacedResource
	if disc != nil {
		s.typedParents = func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
			return typedParentKind(s.KindFor, gvr)
		}
		s.protobufServed = protobufServed(disc.ServerVersion, apiTypesVersion, func() time.Time { return s.now() })
	}
	for _, o := range opts {
		o(s)
	}
	if s.excluded != nil {
		s.listedExcluded = namespaceSet(s.excluded())
	}
	return s
}

// Option configures a Store.
type Option func(*Store)

// CachesOver makes the store's caches list and watch over connections of
// their own to cfg's server, one HTTP/1.1 connection per watch, and
// decodes the watches of children and of parents straight into the
// compact forms they are cached in; reads and writes stay on the clients
// given to New. A watch
// over HTTP/2 costs its reader a frame, flow-control bookkeeping and a
// WINDOW_UPDATE written back for every event, and a hand-off from the
// connection's read loop; over HTTP/1.1 the watch decoder reads the TLS
// connection itself. The price is a TCP and TLS connection per cached
// resource.
func CachesOver(cfg *rest.Config) (Option, error) {
	c := metadata.ConfigFor(cfg)
	c.NextProtos = []string{"http/1.1"}
	httpClient, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("HTTP client of the caches: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("dynamic client of the caches: %w", err)
	}
	meta, err := metadata.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metadata client of the caches: %w", err)
	}
	children, err := childWatchClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("watch client of the caches of children: %w", err)
	}
	parents, err := parentWatchClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("watch client of the caches of parents: %w", err)
	}
	return func(s *Store) {
		s.cacheDynamic, s.cacheMetadata, s.childWatch, s.parentWatch = dyn, meta, children, parents
	}, nil
}

// ExcludingNamespaces makes the caches of namespaced resources leave out
// the objects of the namespaces excluded names: no write there is decided,
// so no decision reads them (a namespaced parent is in the namespace of
// what it owns), and each of their changes would cost a watch event
// (kube-system alone is busy). A lookup there is answered live. excluded
// is read when the store is made and by RelistExcluding, which follows a
// change of it.
func ExcludingNamespaces(excluded func() []string) Option {
	return func(s *Store) { s.excluded = excluded }
}

// ExclusionChange is a change of the namespaces the caches leave out.
type ExclusionChange struct {
	Before, After []string
	// Relisted counts the caches that list and watch again.
	Relisted int
}

// RelistExcluding reads the excluded namespaces again and, when they
// changed, makes every cache of a namespaced resource (parents and
// children) list and watch again without them. Until a cache's new list has arrived,
// its lookups are answered live; a namespace its list left out is always
// answered live. It reports the change, if there was one.
func (s *Store) RelistExcluding() (ExclusionChange, bool) {
	if s.excluded == nil {
		return ExclusionChange{}, false
	}
	after := namespaceSet(s.excluded())
	s.mu.Lock()
	before := s.listedExcluded
	if slices.Equal(before, after) {
		s.mu.Unlock()
		return ExclusionChange{}, false
	}
	s.listedExcluded = after
	var caches []*objectCache
	for _, c := range s.childCaches {
		if c.namespaced {
			caches = append(caches, c)
		}
	}
	for _, c := range s.parentCaches {
		if c.namespaced {
			caches = append(caches, c)
		}
	}
	s.mu.Unlock()
	for _, c := range caches {
		c.listAndWatch()
	}
	return ExclusionChange{Before: before, After: after, Relisted: len(caches)}, true
}

// exclusion is what the caches of children of namespaced resources
// leave out now.
func (s *Store) exclusion() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listedExcluded
}

// namespaceSet is namespaces sorted, each once, "" left out.
func namespaceSet(namespaces []string) []string {
	set := slices.DeleteFunc(slices.Clone(namespaces), func(ns string) bool { return ns == "" })
	slices.Sort(set)
	return slices.Compact(set)
}

// excludingSelector selects the objects of no namespace of excluded.
func excludingSelector(excluded []string) string {
	selectors := make([]fields.Selector, 0, len(excluded))
	for _, ns := range excluded {
		selectors = append(selectors, fields.OneTermNotEqualSelector("metadata.namespace", ns))
	}
	return fields.AndSelectors(selectors...).String()
}

// namespacedResource reports whether discovery says the objects of gvr
// live in namespaces; false when it cannot tell.
func (s *Store) namespacedResource(gvr schema.GroupVersionResource) bool {
	gvk, err := s.KindFor(gvr)
	if err != nil {
		return false
	}
	m, err := s.Mapping(gvk)
	return err == nil && m.Scope.Name() == meta.RESTScopeNameNamespace
}

// RESTMapper is the store's discovery-backed mapper.
func (s *Store) RESTMapper() meta.RESTMapper { return s.mapper }

// RefreshDiscovery reads discovery afresh, unless it was refreshed
// recently: a kind served since is found by the next lookup.
func (s *Store) RefreshDiscovery() { s.mayResetDiscovery() }

// UndiscoveredGroups are the API groups whose discovery failed the last
// time it was read (an aggregated API server that does not answer): their
// kinds are missing from the mapper without being known not to exist.
// An error means discovery could not be read at all.
func (s *Store) UndiscoveredGroups() (map[string]bool, error) {
	_, _, err := s.discovery.ServerGroupsAndResources()
	var partial *discovery.ErrGroupDiscoveryFailed
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &partial):
		groups := make(map[string]bool, len(partial.Groups))
		for gv := range partial.Groups {
			groups[gv.Group] = true
		}
		return groups, nil
	}
	return nil, err
}

// Mapping resolves a kind to its resource and scope through discovery (no
// guessing plurals). An unknown kind refreshes discovery, at most once per
// discoveryResetInterval, since a CRD may have been installed since. The
// mapping is shared by every caller and must not be modified.
func (s *Store) Mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := s.memo.mapping(gvk, s.mapper.RESTMapping)
	if meta.IsNoMatchError(err) && s.mayResetDiscovery() {
		m, err = s.memo.mapping(gvk, s.mapper.RESTMapping)
	}
	return m, err
}

// KindFor resolves a resource to its kind. Resource names match in any
// case, as discovery's mapper matches them; the caller compares with the
// canonical resource of the mapping when that matters.
func (s *Store) KindFor(gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	gvk, err := s.memo.kindFor(gvr, s.mapper.KindFor)
	if meta.IsNoMatchError(err) && s.mayResetDiscovery() {
		gvk, err = s.memo.kindFor(gvr, s.mapper.KindFor)
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
	s.memo.forget()
	return true
}

// GetKindShared reads namespace/name of kind gk, like GetShared, at the
// version the cluster prefers for it: the result must not be modified. For
// cluster-scoped kinds the namespace is ignored.
//
// One version, whatever version a reference names: an ownerReference keeps
// the version it was written with (apps/v1beta2, a CRD version since
// dropped), and any caller may write one naming another served version.
// Read at that version, through a conversion that lays the spec out
// otherwise, the same parent would hash to another spec and look as if it
// had moved, and its kind would be cached once more.
func (s *Store) GetKindShared(ctx context.Context, gk schema.GroupKind, namespace, name string) (*unstructured.Unstructured, Source, error) {
	m, err := s.Mapping(gk.WithVersion(""))
	if err != nil {
		return nil, "", err
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		namespace = ""
	}
	return s.GetShared(ctx, m.Resource, namespace, name)
}

// GetMetadata reads namespace/name of resource gvr as a child: from the
// cache of children when it has synced and holds the object, live
// otherwise. From the cache (Source FromCache) the object has apiVersion,
// kind and metadata only, without managedFields; a live read is whole. The
// returned object is the caller's to change.
func (s *Store) GetMetadata(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, Source, error) {
	if u := s.cachedMetadata(gvr, namespace, name); u != nil {
		return u, FromCache, nil
	}
	u, err := s.GetLive(ctx, gvr, namespace, name)
	return u, FromLive, err
}

// cachedMetadata is namespace/name of gvr from the synced cache of
// children, or nil.
func (s *Store) cachedMetadata(gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	cc := s.childCacheFor(gvr)
	if cc == nil || !cc.store.covers(namespace) {
		return nil
	}
	obj, exists, err := cc.indexer.GetByKey(cacheKey(namespace, name))
	if err != nil || !exists {
		return nil
	}
	c, ok := obj.(*compactChild)
	if !ok {
		return nil
	}
	m, err := c.metadata()
	if err != nil {
		return nil
	}
	u, err := s.metadataObject(gvr, m)
	if err != nil {
		return nil
	}
	return u
}

// GetCachedWhole reads namespace/name of resource gvr from the cache of
// parents, if gvr is cached as a parent, the cache has synced and holds
// the object; ok is false otherwise. It starts no cache and makes no
// request. The object is the caller's to change.
func (s *Store) GetCachedWhole(gvr schema.GroupVersionResource, namespace, name string) (_ *unstructured.Unstructured, ok bool) {
	s.mu.Lock()
	c := s.parentCaches[gvr]
	s.mu.Unlock()
	if c == nil || !c.store.covers(namespace) {
		return nil, false
	}
	obj, exists, err := c.indexer.GetByKey(cacheKey(namespace, name))
	if err != nil || !exists {
		return nil, false
	}
	p, isParent := obj.(*compactParent)
	if !isParent {
		return nil, false
	}
	// Copying the decoded parent costs less than decoding it again: a
	// write to a parent (its status) is often beside writes under it.
	u, err := s.parents.shared(gvr, p)
	if err != nil {
		return nil, false
	}
	return u.DeepCopy(), true
}

// GetWhole reads namespace/name of resource gvr whole: from the cache of
// parents when gvr is cached as a parent and the cache holds the object
// (without managedFields then), live otherwise. It starts no cache: a
// resource that is only ever a child is read live. The returned object is
// the caller's to change.
func (s *Store) GetWhole(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, Source, error) {
	if u, ok := s.GetCachedWhole(gvr, namespace, name); ok {
		return u, FromCache, nil
	}
	u, err := s.GetLive(ctx, gvr, namespace, name)
	return u, FromLive, err
}

// metadataObject turns a cached child into an unstructured object that has
// its kind: a metadata watch does not always say it.
func (s *Store) metadataObject(gvr schema.GroupVersionResource, m *metav1.PartialObjectMetadata) (*unstructured.Unstructured, error) {
	gvk, err := s.memo.kindFor(gvr, s.mapper.KindFor)
	if err != nil {
		return nil, err
	}
	content, err := metadataContent(&m.ObjectMeta)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]interface{}{"metadata": content}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

func cacheKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// GetShared reads namespace/name of resource gvr as a parent (or a
// namespace): from the cache of parents when it has synced and holds the
// object, without managedFields then, live otherwise. The result may be
// shared with other readers (the parents last read are kept decoded) and
// must not be modified. Decisions only read parents and namespaces, and
// copying them was a large share of a cache-hit write's garbage.
func (s *Store) GetShared(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, Source, error) {
	if u := s.cachedShared(gvr, namespace, name); u != nil {
		return u, FromCache, nil
	}
	u, err := s.GetLive(ctx, gvr, namespace, name)
	return u, FromLive, err
}

// cachedShared is namespace/name of gvr from the synced cache of parents,
// started if it was not, decoded and shared; or nil.
func (s *Store) cachedShared(gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	c := s.parentCacheFor(gvr)
	if c == nil || !c.store.covers(namespace) {
		return nil
	}
	obj, exists, err := c.indexer.GetByKey(cacheKey(namespace, name))
	if err != nil || !exists {
		return nil
	}
	p, ok := obj.(*compactParent)
	if !ok {
		return nil
	}
	u, err := s.parents.shared(gvr, p)
	if err != nil {
		return nil
	}
	return u
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

// Owned lists the objects of gvr in namespace whose controller is owner.
// With metadataOnly, they come from the cache of children when it has
// synced, as metadata only; otherwise, or when the caller reads more than
// metadata, they are listed live (at most maxOwnedListed objects of the
// namespace are looked at). The objects must not be modified.
func (s *Store) Owned(ctx context.Context, gvr schema.GroupVersionResource, namespace string, owner types.UID, metadataOnly bool) ([]*unstructured.Unstructured, error) {
	if c := s.childCacheFor(gvr); metadataOnly && c != nil && c.store.covers(namespace) {
		return s.ownedFromCache(c.indexer, gvr, namespace, owner)
	}
	list, err := s.dynamic.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{Limit: maxOwnedListed})
	if err != nil {
		return nil, err
	}
	var owned []*unstructured.Unstructured
	for i := range list.Items {
		if ref := metav1.GetControllerOfNoCopy(&list.Items[i]); ref != nil && ref.UID == owner {
			owned = append(owned, &list.Items[i])
		}
	}
	return owned, nil
}

// Synced reports whether the cache of parents of gvr has synced (it is
// started if it was not and gvr is admitted). Resources that are never
// cached never sync.
func (s *Store) Synced(gvr schema.GroupVersionResource) bool {
	c := s.parentCacheFor(gvr)
	return c != nil && c.store.hasSynced()
}

// WaitForMetadataSync starts the cache of children of gvr and waits until
// it has synced or ctx is done.
func (s *Store) WaitForMetadataSync(ctx context.Context, gvr schema.GroupVersionResource) error {
	c := s.childCacheFor(gvr)
	if c == nil {
		return fmt.Errorf("%s is not cached as a child: it is never cached, or the proxy holds %d such caches already", gvr, s.maxInformers)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.store.hasSynced) {
		return fmt.Errorf("cache of children %s did not sync: %w", gvr, ctx.Err())
	}
	return nil
}

// AdmitParents lets the parents of gvr be cached: the next read of one
// starts the cache of every object of gvr the caches cover. Until then
// they are read live. A cache holds every object of its resource in the
// cluster, so whatever admits one decides what the proxy's memory and
// watch events grow with: the write path admits a kind only for a write
// decided for its parent's recorded controller, which no caller can name
// itself (see decision.WatchesParentKind).
func (s *Store) AdmitParents(gvr schema.GroupVersionResource) {
	s.mu.Lock()
	s.admitted[gvr] = true
	s.mu.Unlock()
}

// AdmitParentKind is AdmitParents for the resource of kind gvk.
func (s *Store) AdmitParentKind(gvk schema.GroupVersionKind) error {
	m, err := s.Mapping(gvk)
	if err != nil {
		return err
	}
	s.AdmitParents(m.Resource)
	return nil
}

// CachesParentsOf reports whether the parents of gvr may be cached
// (AdmitParents).
func (s *Store) CachesParentsOf(gvr schema.GroupVersionResource) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admitted[gvr] && !uncached[gvr.GroupResource()]
}

// CachedResources are the resources the store holds caches of, parents
// and children, each sorted.
func (s *Store) CachedResources() (parents, children []schema.GroupVersionResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for gvr := range s.parentCaches {
		parents = append(parents, gvr)
	}
	for gvr := range s.childCaches {
		children = append(children, gvr)
	}
	byName := func(a, b schema.GroupVersionResource) int { return strings.Compare(a.String(), b.String()) }
	slices.SortFunc(parents, byName)
	slices.SortFunc(children, byName)
	return parents, children
}

// WaitForSync admits the parents of gvr (AdmitParents), starts their
// cache and waits until it has synced or ctx is done.
func (s *Store) WaitForSync(ctx context.Context, gvr schema.GroupVersionResource) error {
	s.AdmitParents(gvr)
	c := s.parentCacheFor(gvr)
	if c == nil {
		return fmt.Errorf("%s is not cached: it is never cached, or the proxy holds %d caches already", gvr, s.maxInformers)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.store.hasSynced) {
		return fmt.Errorf("cache for %s did not sync: %w", gvr, ctx.Err())
	}
	return nil
}

// parentCacheFor returns the cache of parents of gvr, started on first
// use, or nil when gvr is not admitted, is never cached or the store holds
// its most caches of parents. gvr must be a canonical resource, as a RESTMapping names
// it: every spelling would otherwise be a cluster-wide cache of its own.
// Like the caches of children, it is client-go's reflector
// writing into a store of the proxy's own (objectStore): over the caches'
// own connections (CachesOver), the goroutine that reads a parent's event
// decodes it in one pass (parentEventDecoder) and writes it into the
// cache, and the observers hear of it in the same call. A list is decoded
// by the dynamic client, its parents made compact as the store takes
// them.
func (s *Store) parentCacheFor(gvr schema.GroupVersionResource) *objectCache {
	if uncached[gvr.GroupResource()] {
		return nil
	}
	s.mu.Lock()
	c, admitted := s.parentCaches[gvr], s.admitted[gvr]
	s.mu.Unlock()
	if c != nil || !admitted {
		return c
	}
	// Discovery is asked before the store's lock is taken: it takes it
	// to refresh.
	var typedKind schema.GroupVersionKind
	typed := false
	if s.parentWatch != nil && s.childWatch != nil && s.typedParents != nil {
		typedKind, typed = s.typedParents(gvr)
	}
	return s.cacheFor(s.parentCaches, gvr, func() cacheSource {
		client := s.cacheDynamic.Resource(gvr)
		src := cacheSource{kind: parentKind, objectType: &unstructured.Unstructured{}, client: s.cacheDynamic, list: listOf(client.List), watch: client.Watch}
		switch {
		case typed:
			src.objectType = &compactParent{}
			src.open = func(selector *exclusionSelector) openWatch { return s.openTypedParentWatch(gvr, typedKind, selector) }
		case s.parentWatch != nil:
			src.objectType = &compactParent{}
			src.open = func(selector *exclusionSelector) openWatch { return s.openParentWatch(gvr, selector) }
		}
		return src
	})
}

// ParentsInProtobuf reports whether the cache of parents of gvr watches
// them in protobuf now: gvr is of a built-in kind, and kube-apiserver is
// of the minor version of the API types the proxy is built with.
func (s *Store) ParentsInProtobuf(gvr schema.GroupVersionResource) bool {
	if s.parentWatch == nil || s.childWatch == nil || s.typedParents == nil {
		return false
	}
	_, ok := s.typedParents(gvr)
	return ok && s.protobufServed()
}

// lazyStart returns the cache of gvr in started, starting it with start
// when the store holds fewer than its most caches of that sort; the zero
// value (nil) when it holds that many.
func lazyStart[C comparable](s *Store, started map[schema.GroupVersionResource]C, gvr schema.GroupVersionResource,
	start func() (C, func(context.Context))) C {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := started[gvr]; ok {
		return c
	}
	if len(started) >= s.maxInformers {
		var none C
		return none
	}
	c, run := start()
	started[gvr] = c
	go run(s.ctx)
	return c
}

// objectCache is a cache of parents or of children: client-go's reflector
// and the store it lists into (objectStore), which the watch writes each
// change into from the goroutine that reads it (watchIntoStore). Most
// watch events are of objects the proxy decides nothing about, and it
// sits idle between them: an informer would hand each one on through a
// queue to a goroutine of its own, a shared informer through two more,
// each woken on a sleeping thread.
type objectCache struct {
	indexer cache.Indexer
	store   *objectStore
	// namespaced: the cache leaves out the excluded namespaces, and lists
	// and watches again when they change.
	namespaced bool
	// exclusion is what to leave out now; reflectorFor makes the
	// reflector of one list and watch.
	exclusion    func() []string
	reflectorFor func(store listingStore, fieldSelector string) *cache.Reflector
	ctx          context.Context

	mu sync.Mutex
	// running: a reflector lists and watches without listed; stop stops
	// it, and reflectorDone is closed once it has returned.
	running       bool
	listed        []string
	stop          context.CancelFunc
	reflectorDone chan struct{}
}

// listAndWatch starts the list and watch of what the cache leaves out
// now, stopping the one before, unless that one leaves out the same.
func (c *objectCache) listAndWatch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var excluded []string
	if c.namespaced {
		excluded = c.exclusion()
	}
	if c.running && slices.Equal(c.listed, excluded) {
		return
	}
	if c.stop != nil {
		c.stop()
	}
	store := c.store.relist(excluded)
	reflector := c.reflectorFor(store, excludingSelector(excluded))
	ctx, stop := context.WithCancel(c.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reflector.RunWithContext(ctx)
	}()
	c.running, c.listed, c.stop, c.reflectorDone = true, excluded, stop, done
}

// exclusionSelector is the field selector of one list and watch of a
// cache. Every namespaced resource kube-apiserver serves takes
// metadata.namespace, but an aggregated API server need not: refused, the
// cache lists and watches every namespace, as it did before it left any
// out; lookups in the excluded ones are answered live all the same.
type exclusionSelector struct {
	gvr      schema.GroupVersionResource
	selector string
	refused  atomic.Bool
}

func (c *exclusionSelector) get() string {
	if c.refused.Load() {
		return ""
	}
	return c.selector
}

// refusedBy takes the answer to a list or watch with the selector: a Bad
// Request refuses it, and the reflector's next attempt goes without.
func (c *exclusionSelector) refusedBy(ctx context.Context, err error) {
	if err == nil || c.selector == "" || !apierrors.IsBadRequest(err) || c.refused.Swap(true) {
		return
	}
	klog.FromContext(ctx).Info("the children's list or watch refused the field selector of the excluded namespaces; caching every namespace",
		"resource", c.gvr.String(), "fieldSelector", c.selector, "err", err)
}

// childCacheFor is parentCacheFor for the cache of children: metadata only,
// listed and watched as the metadata informer of client-go does, with its
// own bound.
func (s *Store) childCacheFor(gvr schema.GroupVersionResource) *objectCache {
	if uncached[gvr.GroupResource()] || s.cacheMetadata == nil {
		return nil
	}
	return s.cacheFor(s.childCaches, gvr, func() cacheSource {
		client := s.cacheMetadata.Resource(gvr)
		src := cacheSource{kind: childKind, objectType: &metav1.PartialObjectMetadata{}, client: s.cacheMetadata, list: listOf(client.List), watch: client.Watch}
		if s.childWatch != nil {
			src.objectType = &compactChild{}
			src.open = func(selector *exclusionSelector) openWatch { return s.openChildWatch(gvr, selector) }
		}
		return src
	})
}

// cacheSource is what a cache lists and watches, and how.
type cacheSource struct {
	kind cachedKind
	// objectType is the type of the objects the watch hands the
	// reflector.
	objectType runtime.Object
	// client is the client list and watch use, asked whether it does
	// watch lists.
	client any
	list   func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	watch  func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// open, when set, opens a watch that writes into the store itself
	// (watchIntoStore) in place of watch.
	open func(selector *exclusionSelector) openWatch
}

// listOf is list as a cache's list function.
func listOf[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error)) func(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return list(ctx, opts) }
}

// cacheFor returns the cache of gvr in caches, started on first use from
// what source says, or nil when caches holds its most already. A cache of
// a namespaced resource leaves out the excluded namespaces.
func (s *Store) cacheFor(caches map[schema.GroupVersionResource]*objectCache, gvr schema.GroupVersionResource, source func() cacheSource) *objectCache {
	s.mu.Lock()
	c := caches[gvr]
	s.mu.Unlock()
	if c != nil {
		return c
	}
	// Discovery is asked before the store's lock is taken: it takes it
	// to refresh.
	namespaced := s.excluded != nil && s.namespaced(gvr)
	return lazyStart(s, caches, gvr, func() (*objectCache, func(context.Context)) {
		src := source()
		store := newObjectStore(src.kind, s.observersNow)
		c := &objectCache{indexer: store.indexer, store: store, namespaced: namespaced, exclusion: s.exclusion, ctx: s.ctx}
		c.reflectorFor = func(store listingStore, fieldSelector string) *cache.Reflector {
			selector := &exclusionSelector{gvr: gvr, selector: fieldSelector}
			watchFunc := func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.FieldSelector = selector.get()
				w, err := src.watch(ctx, opts)
				selector.refusedBy(ctx, err)
				return w, err
			}
			if src.open != nil {
				watchFunc = watchIntoStore(store, src.open(selector))
			}
			lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
					opts.FieldSelector = selector.get()
					list, err := src.list(ctx, opts)
					selector.refusedBy(ctx, err)
					return list, err
				},
				WatchFuncWithContext: watchFunc,
			}, src.client)
			return cache.NewReflectorWithOptions(lw, src.objectType, store, cache.ReflectorOptions{Name: src.kind.what + " " + gvr.String()})
		}
		return c, func(context.Context) { c.listAndWatch() }
	})
}

// LeanParent is the first step of the transform of the caches of parents
// (the second keeps the object as JSON): of managedFields,
// often as large as the rest of the object, it keeps only who owns
// status.observedGeneration, which identifies the parent's controller
// before the proxy has recorded it. The spec stays (settledness hashes it,
// approval policies and history limits read it), and so does the status
// settledness reads.
func LeanParent(obj interface{}) (interface{}, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	md, ok := u.Object["metadata"].(map[string]interface{})
	if !ok {
		return obj, nil
	}
	entries, _ := md["managedFields"].([]interface{})
	var kept []interface{}
	for _, e := range entries {
		entry, _ := e.(map[string]interface{})
		fields, _ := entry["fieldsV1"].(map[string]interface{})
		status, _ := fields["f:status"].(map[string]interface{})
		if _, owns := status["f:observedGeneration"]; !owns {
			continue
		}
		lean := make(map[string]interface{}, len(entry))
		for k, v := range entry {
			lean[k] = v
		}
		lean["fieldsV1"] = map[string]interface{}{"f:status": map[string]interface{}{"f:observedGeneration": map[string]interface{}{}}}
		kept = append(kept, lean)
	}
	if kept == nil {
		delete(md, "managedFields")
	} else {
		md["managedFields"] = kept
	}
	return obj, nil
}

// LeanChild is the first step of the transform of the caches of children
// (the second keeps the metadata as protobuf): metadata without
// managedFields and labels, which no decision reads of a stored child (a
// policy that might is evaluated on the whole child, read live).
func LeanChild(obj interface{}) (interface{}, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
		m.Labels = nil
	}
	return obj, nil
}

// ownedFromCache lists, from the synced cache of children inf, the objects
// of gvr in namespace whose controller is owner, as metadata.
func (s *Store) ownedFromCache(children cache.Indexer, gvr schema.GroupVersionResource, namespace string, owner types.UID) ([]*unstructured.Unstructured, error) {
	objs, err := children.ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return nil, err
	}
	var all []*unstructured.Unstructured
	for _, o := range objs {
		c, ok := o.(*compactChild)
		if !ok {
			continue
		}
		m, err := c.metadata()
		if err != nil {
			return nil, err
		}
		if ref := metav1.GetControllerOfNoCopy(m); ref == nil || ref.UID != owner {
			continue
		}
		u, err := s.metadataObject(gvr, m)
		if err != nil {
			return nil, err
		}
		all = append(all, u)
	}
	return all, nil
}
