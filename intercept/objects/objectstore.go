package objects

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// cachedObject is an object as a cache keeps it (compactChild,
// compactParent).
type cachedObject interface {
	runtime.Object
	identity() (namespace, name string, uid types.UID)
}

// cachedKind is what a cache does with the objects it holds: the form it
// keeps them in, and what it tells the observers of a change.
type cachedKind struct {
	// what the cache holds, for messages.
	what    string
	compact cache.TransformFunc
	// changed tells observers of a change to obj; decoded, when not nil,
	// is obj decoded as the watch read it, for the observers that read
	// the whole object.
	changed func(observers []Observer, obj interface{}, decoded *watchDecoded)
}

var (
	childKind  = cachedKind{what: "children", compact: compactChildOf, changed: childChanged}
	parentKind = cachedKind{what: "parents", compact: compactParentOf, changed: parentChanged}
)

// objectStore is what the reflector of a cache writes into: the cached
// objects, with the store's observers told of each change in the same
// call. An informer would queue each event for a goroutine of its own to
// apply and hand on, a goroutine woken and a list of deltas allocated for
// every event, for a cache whose one consumer returns at once. The
// reflector keeps the rest of an informer's watching: list or watch list,
// resuming from the last resourceVersion, relisting after 410 Gone,
// backing off.
type objectStore struct {
	kind      cachedKind
	indexer   cache.Indexer
	observers func() []Observer
	// listing is the list and watch the store follows now. A reflector
	// writes into the store through a listingStore of its listing; once
	// the store follows another, what it writes is dropped, so a reflector
	// being stopped cannot overwrite the newer list with an older change.
	// writeMu orders every write with the change of listing.
	listing atomic.Pointer[storeListing]
	writeMu sync.Mutex

	// replaced counts the lists the store has been replaced with;
	// nextReplace is closed by the next.
	mu          sync.Mutex
	replaced    uint64
	nextReplace chan struct{}
}

// storeListing is one list and watch of a cache.
type storeListing struct {
	generation uint64
	// excluded are the namespaces the list and watch leave out: the store
	// holds none of their objects it can vouch for.
	excluded []string
	// synced is set once the list is in the store and its objects have
	// reached the observers.
	synced bool
}

var _ cache.TransformingStore = listingStore{}

func newObjectStore(kind cachedKind, observers func() []Observer) *objectStore {
	s := &objectStore{
		kind:        kind,
		indexer:     cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		observers:   observers,
		nextReplace: make(chan struct{}),
	}
	s.listing.Store(&storeListing{})
	return s
}

// relist makes the store follow a new list and watch that leaves out the
// namespaces excluded, and returns the store as that list and watch must
// write into it. Until its list has arrived, the store is not synced:
// the watch it followed is stopped, and its objects would go stale
// unseen.
func (s *objectStore) relist(excluded []string) listingStore {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	generation := s.listing.Load().generation + 1
	s.listing.Store(&storeListing{generation: generation, excluded: excluded})
	return listingStore{objectStore: s, generation: generation}
}

// current is the store as the list and watch it follows writes into it.
func (s *objectStore) current() listingStore {
	return listingStore{objectStore: s, generation: s.listing.Load().generation}
}

// covers reports whether the store answers for the objects of
// namespace: its list has arrived, and did not leave namespace out.
func (s *objectStore) covers(namespace string) bool {
	l := s.listing.Load()
	return l.synced && !slices.Contains(l.excluded, namespace)
}

// listingStore is a objectStore as one list and watch writes into it:
// nothing once the store follows another.
type listingStore struct {
	*objectStore
	generation uint64
}

// followed reports whether the store still follows l's list and watch;
// writeMu is held.
func (l listingStore) followed() bool { return l.listing.Load().generation == l.generation }

// compact is obj as the cache keeps it.
func (s *objectStore) compact(obj interface{}) (cachedObject, error) {
	t, err := s.kind.compact(obj)
	if err != nil {
		return nil, err
	}
	c, ok := t.(cachedObject)
	if !ok {
		return nil, fmt.Errorf("a cache of %s was given a %T", s.kind.what, t)
	}
	return c, nil
}

func (l listingStore) Add(obj interface{}) error { return l.Update(obj) }

func (l listingStore) Update(obj interface{}) error { return l.updateDecoded(obj, nil) }

// updateDecoded is Update of obj, which the watch decoded as decoded.
func (l listingStore) updateDecoded(obj interface{}, decoded *watchDecoded) error {
	return l.write(obj, func(c cachedObject) error {
		if err := l.indexer.Update(c); err != nil {
			return err
		}
		l.kind.changed(l.observers(), c, decoded)
		return nil
	})
}

func (l listingStore) Delete(obj interface{}) error {
	return l.write(obj, func(c cachedObject) error {
		if err := l.indexer.Delete(c); err != nil {
			return err
		}
		_, _, uid := c.identity()
		for _, o := range l.observers() {
			o.Forget(uid)
		}
		return nil
	})
}

// write applies one change of obj, made compact, while the store follows
// l's list and watch.
func (l listingStore) write(obj interface{}, apply func(c cachedObject) error) error {
	c, err := l.compact(obj)
	if err != nil {
		return err
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if !l.followed() {
		return nil
	}
	return apply(c)
}

// Replace makes the store hold list, after a list or a watch list: the
// first, or one after the watch broke off (410 Gone, a restarted
// kube-apiserver). An object deleted in between sent no event, so the
// observers are told here of every cached object the list lacks, and of
// one whose name the list holds with another UID (deleted and created
// again); and of every listed object as a change, as an informer would.
// A cached child of a namespace the list leaves out is dropped without a
// word: it left the list because its namespace is now excluded, and the
// observers would take it for deleted (settledness forgets what it
// recorded of a deleted object).
func (l listingStore) Replace(list []interface{}, _ string) error {
	objects := make([]interface{}, 0, len(list))
	uidOf := make(map[string]types.UID, len(list))
	for _, obj := range list {
		c, err := l.compact(obj)
		if err != nil {
			return err
		}
		objects = append(objects, c)
		namespace, name, uid := c.identity()
		uidOf[cacheKey(namespace, name)] = uid
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	listing := l.listing.Load()
	if listing.generation != l.generation {
		return nil
	}
	var gone []types.UID
	for _, obj := range l.indexer.List() {
		c, ok := obj.(cachedObject)
		if !ok {
			continue
		}
		if namespace, name, uid := c.identity(); !slices.Contains(listing.excluded, namespace) {
			if listedUID, listed := uidOf[cacheKey(namespace, name)]; !listed || listedUID != uid {
				gone = append(gone, uid)
			}
		}
	}
	if err := l.indexer.Replace(objects, ""); err != nil {
		return err
	}
	observers := l.observers()
	for _, uid := range gone {
		for _, o := range observers {
			o.Forget(uid)
		}
	}
	for _, c := range objects {
		l.kind.changed(observers, c, nil)
	}
	l.listing.Store(&storeListing{generation: listing.generation, excluded: listing.excluded, synced: true})
	l.mu.Lock()
	l.replaced++
	close(l.nextReplace)
	l.nextReplace = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// replaces is how many lists the store has been replaced with.
func (s *objectStore) replaces() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replaced
}

// replacedSince is closed once the store has been replaced with more than
// n lists.
func (s *objectStore) replacedSince(n uint64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replaced > n {
		done := make(chan struct{})
		close(done)
		return done
	}
	return s.nextReplace
}

// Resync does nothing: the caches are not resynced, and the reflector
// calls it only when they are.
func (s *objectStore) Resync() error { return nil }

// Transformer makes the store a watch list fills before Replace keep
// objects compact too, rather than the whole initial list as decoded.
func (s *objectStore) Transformer() cache.TransformFunc { return s.kind.compact }

func (s *objectStore) hasSynced() bool { return s.listing.Load().synced }
