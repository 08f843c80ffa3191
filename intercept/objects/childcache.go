package objects

import (
	"fmt"
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
	// synced is set once the first list is in the store and its children
	// have reached the observers.
	synced atomic.Bool

	// replaced counts the lists the store has been replaced with;
	// nextReplace is closed by the next.
	mu          sync.Mutex
	replaced    uint64
	nextReplace chan struct{}
}

var _ cache.TransformingStore = (*childStore)(nil)

func newChildStore(observers func() []Observer) *childStore {
	return &childStore{
		indexer:     cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		observers:   observers,
		nextReplace: make(chan struct{}),
	}
}

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

func (s *childStore) Add(obj interface{}) error { return s.Update(obj) }

func (s *childStore) Update(obj interface{}) error {
	c, err := compact(obj)
	if err != nil {
		return err
	}
	if err := s.indexer.Update(c); err != nil {
		return err
	}
	childChanged(s.observers(), c)
	return nil
}

func (s *childStore) Delete(obj interface{}) error {
	c, err := compact(obj)
	if err != nil {
		return err
	}
	if err := s.indexer.Delete(c); err != nil {
		return err
	}
	for _, o := range s.observers() {
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
func (s *childStore) Replace(list []interface{}, _ string) error {
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
	var gone []types.UID
	for _, obj := range s.indexer.List() {
		if c, ok := obj.(*compactChild); ok {
			if uid, listed := uidOf[cacheKey(c.namespace, c.name)]; !listed || uid != c.uid {
				gone = append(gone, c.uid)
			}
		}
	}
	if err := s.indexer.Replace(children, ""); err != nil {
		return err
	}
	observers := s.observers()
	for _, uid := range gone {
		for _, o := range observers {
			o.Forget(uid)
		}
	}
	for _, c := range children {
		childChanged(observers, c)
	}
	s.synced.Store(true)
	s.mu.Lock()
	s.replaced++
	close(s.nextReplace)
	s.nextReplace = make(chan struct{})
	s.mu.Unlock()
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

func (s *childStore) hasSynced() bool { return s.synced.Load() }
