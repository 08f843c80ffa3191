package objects

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// childStore is what the reflector of a cache of children writes into:
// the cached children, with the store's observers told of each change in
// the same call. An informer would queue each event for a goroutine of its
// own to apply and hand on, a goroutine woken and a list of deltas
// allocated for every event, for a cache whose one consumer returns at
// once. The reflector keeps the rest of an informer's watching: list or
// watch list, resuming from the last resourceVersion, relisting after 410
// Gone, backing off.
type childStore struct {
	indexer   cache.Indexer
	observers func() []Observer
	// listing is the list and watch the store follows now. A reflector
	// writes into the store through a listingStore of its listing; once
	// the store follows another, what it writes is dropped, so a reflector
	// being stopped cannot overwrite the newer list with an older change.
	// writeMu orders every write with the change of listing.
	listing atomic.Pointer[childListing]
	writeMu sync.Mutex

	// replaced counts the lists the store has been replaced with;
	// nextReplace is closed by the next.
	mu          sync.Mutex
	replaced    uint64
	nextReplace chan struct{}
}

// childListing is one list and watch of a cache of children.
type childListing struct {
	generation uint64
	// excluded are the namespaces the list and watch leave out: the store
	// holds none of their children it can vouch for.
	excluded []string
	// synced is set once the list is in the store and its children have
	// reached the observers.
	synced bool
}

var _ cache.TransformingStore = listingStore{}

func newChildStore(observers func() []Observer) *childStore {
	s := &childStore{
		indexer:     cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		observers:   observers,
		nextReplace: make(chan struct{}),
	}
	s.listing.Store(&childListing{})
	return s
}

// relist makes the store follow a new list and watch that leaves out the
// namespaces excluded, and returns the store as that list and watch must
// write into it. Until its list has arrived, the store is not synced:
// the watch it followed is stopped, and its children would go stale
// unseen.
func (s *childStore) relist(excluded []string) listingStore {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	generation := s.listing.Load().generation + 1
	s.listing.Store(&childListing{generation: generation, excluded: excluded})
	return listingStore{childStore: s, generation: generation}
}

// current is the store as the list and watch it follows writes into it.
func (s *childStore) current() listingStore {
	return listingStore{childStore: s, generation: s.listing.Load().generation}
}

// covers reports whether the store answers for the children of
// namespace: its list has arrived, and did not leave namespace out.
func (s *childStore) covers(namespace string) bool {
	l := s.listing.Load()
	return l.synced && !slices.Contains(l.excluded, namespace)
}

// listingStore is a childStore as one list and watch writes into it:
// nothing once the store follows another.
type listingStore struct {
	*childStore
	generation uint64
}

// followed reports whether the store still follows l's list and watch;
// writeMu is held.
func (l listingStore) followed() bool { return l.listing.Load().generation == l.generation }

// compact is obj as the cache keeps it.
func compact(obj interface{}) (*compactChild, error) {
	t, err := compactChildOf(obj)
	if err != nil {
		return nil, err
	}
	c, ok := t.(*compactChild)
	if !ok {
		return nil, fmt.Errorf("a cache of children was given a %T", t)
	}
	return c, nil
}

func (l listingStore) Add(obj interface{}) error { return l.Update(obj) }

func (l listingStore) Update(obj interface{}) error {
	c, err := compact(obj)
	if err != nil {
		return err
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if !l.followed() {
		return nil
	}
	if err := l.indexer.Update(c); err != nil {
		return err
	}
	childChanged(l.observers(), c)
	return nil
}

func (l listingStore) Delete(obj interface{}) error {
	c, err := compact(obj)
	if err != nil {
		return err
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if !l.followed() {
		return nil
	}
	if err := l.indexer.Delete(c); err != nil {
		return err
	}
	for _, o := range l.observers() {
		o.Forget(c.uid)
	}
	return nil
}

// Replace makes the store hold list, after a list or a watch list: the
// first, or one after the watch broke off (410 Gone, a restarted
// kube-apiserver). A child deleted in between sent no event, so the
// observers are told here of every cached child the list lacks, and of
// one whose name the list holds with another UID (deleted and created
// again); and of every listed child as a change, as an informer would.
// A cached child of a namespace the list leaves out is dropped without a
// word: it left the list because its namespace is now excluded, and the
// observers would take it for deleted (settledness forgets what it
// recorded of a deleted object).
func (l listingStore) Replace(list []interface{}, _ string) error {
	children := make([]interface{}, 0, len(list))
	uidOf := make(map[string]types.UID, len(list))
	for _, obj := range list {
		c, err := compact(obj)
		if err != nil {
			return err
		}
		children = append(children, c)
		uidOf[cacheKey(c.namespace, c.name)] = c.uid
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	listing := l.listing.Load()
	if listing.generation != l.generation {
		return nil
	}
	var gone []types.UID
	for _, obj := range l.indexer.List() {
		if c, ok := obj.(*compactChild); ok && !slices.Contains(listing.excluded, c.namespace) {
			if uid, listed := uidOf[cacheKey(c.namespace, c.name)]; !listed || uid != c.uid {
				gone = append(gone, c.uid)
			}
		}
	}
	if err := l.indexer.Replace(children, ""); err != nil {
		return err
	}
	observers := l.observers()
	for _, uid := range gone {
		for _, o := range observers {
			o.Forget(uid)
		}
	}
	for _, c := range children {
		childChanged(observers, c)
	}
	l.listing.Store(&childListing{generation: listing.generation, excluded: listing.excluded, synced: true})
	l.mu.Lock()
	l.replaced++
	close(l.nextReplace)
	l.nextReplace = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// replaces is how many lists the store has been replaced with.
func (s *childStore) replaces() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replaced
}

// replacedSince is closed once the store has been replaced with more than
// n lists.
func (s *childStore) replacedSince(n uint64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replaced > n {
		done := make(chan struct{})
		close(done)
		return done
	}
	return s.nextReplace
}

// Resync does nothing: the caches of children are not resynced, and
// the reflector calls it only when they are.
func (s *childStore) Resync() error { return nil }

// Transformer makes the store a watch list fills before Replace keep
// children compact too, rather than the whole initial list as decoded.
func (s *childStore) Transformer() cache.TransformFunc { return compactChildOf }

func (s *childStore) hasSynced() bool { return s.listing.Load().synced }
