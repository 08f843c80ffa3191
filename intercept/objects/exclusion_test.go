package objects

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
)

// excludedNamespaces is what the config file says, changed by the test.
type excludedNamespaces struct {
	mu         sync.Mutex
	namespaces []string
}

func (e *excludedNamespaces) set(namespaces ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.namespaces = namespaces
}

func (e *excludedNamespaces) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.namespaces)
}

// storeExcluding is a Store whose caches list and watch s, leaving out
// the namespaces excluded says.
func (s *childServer) storeExcluding(ctx context.Context, excluded *excludedNamespaces) *Store {
	s.t.Helper()
	return storeExcluding(ctx, s.t, s.server.URL, excluded)
}

// storeExcluding is a Store whose caches list and watch the server at url,
// leaving out the namespaces excluded says; discovery knows Deployments
// (namespaced) and Widgets (cluster-scoped).
func storeExcluding(ctx context.Context, t testing.TB, url string, excluded *excludedNamespaces) *Store {
	t.Helper()
	cachesOver, err := CachesOver(&rest.Config{Host: url, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	disc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: []string{"get", "list", "watch"}}}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: false, Verbs: []string{"get", "list", "watch"}}}},
	}
	return New(ctx, disc, nil, nil, cachesOver, ExcludingNamespaces(excluded.get))
}

func childIn(namespace, name string) *metav1.PartialObjectMetadata {
	return partialMetadata(metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7"})
}

func waitUntil(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func cachedKeys(c *objectCache) []string {
	keys := c.indexer.ListKeys()
	slices.Sort(keys)
	return keys
}

// goroutinesIn counts the goroutines whose stack passes through fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if strings.Contains(string(g), fn) {
			count++
		}
	}
	return count
}

// A cache of children of a namespaced resource lists and watches with a
// field selector that leaves out every excluded namespace, and holds no
// child there; a cluster-scoped resource is listed whole.
func TestChildCacheLeavesOutTheExcludedNamespaces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := newChildServer(t, childIn("prod", "a"), childIn("kube-system", "b"), childIn("batch", "c"))
	excluded := &excludedNamespaces{}
	excluded.set("kube-system", "batch", "kube-system")
	s := srv.storeExcluding(ctx, excluded)
	syncCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	if err := s.WaitForMetadataSync(syncCtx, deployments); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the watch", func() bool { _, open := srv.fieldSelectors(); return open == 1 })
	selectors, _ := srv.fieldSelectors()
	want := "metadata.namespace!=batch,metadata.namespace!=kube-system"
	if len(selectors) == 0 || slices.ContainsFunc(selectors, func(s string) bool { return s != want }) {
		t.Errorf("the cache listed and watched with field selectors %q, want each %q", selectors, want)
	}
	c := s.childCacheFor(deployments)
	if keys := cachedKeys(c); !slices.Equal(keys, []string{"prod/a"}) {
		t.Errorf("the cache holds %v, want prod/a only", keys)
	}
	if !c.store.covers("prod") || c.store.covers("batch") || c.store.covers("kube-system") {
		t.Error("the cache answers for an excluded namespace, or not for an included one")
	}

	if err := s.WaitForMetadataSync(syncCtx, widgets); err != nil {
		t.Fatal(err)
	}
	selectors, _ = srv.fieldSelectors()
	if last := selectors[len(selectors)-1]; last != "" {
		t.Errorf("the cache of a cluster-scoped resource listed with field selector %q", last)
	}
}

// A change of the excluded namespaces makes a cache of children list and
// watch again with the new selector: the old watch ends, its goroutines
// with it; the children of a namespace now excluded leave the cache
// without being reported deleted; one of a namespace now included is
// not answered from the cache before the new list has arrived. Reading
// the same exclusion again changes nothing.
func TestChildCacheRelistsWhenTheExcludedNamespacesChange(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := childIn("prod", "a"), childIn("batch", "b")
	srv := newChildServer(t, a, b)
	excluded := &excludedNamespaces{}
	excluded.set("batch")
	s := srv.storeExcluding(ctx, excluded)
	seen := &metadataRecorder{}
	s.AddObserver(seen)
	syncCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	if err := s.WaitForMetadataSync(syncCtx, deployments); err != nil {
		t.Fatal(err)
	}
	c := s.childCacheFor(deployments)
	waitUntil(t, "the first watch", func() bool { _, open := srv.fieldSelectors(); return open == 1 })
	if s.cachedMetadata(deployments, "prod", "a") == nil {
		t.Fatal("prod/a is not answered from the synced cache")
	}
	if _, changed := s.RelistExcluding(); changed {
		t.Error("reading the same excluded namespaces again relisted")
	}
	c.mu.Lock()
	firstReflector := c.reflectorDone
	c.mu.Unlock()
	waitUntil(t, "one goroutine decoding a watch of children before the change", func() bool { return goroutinesIn("(*storeWritingDecoder).Decode") == 1 })

	// batch is included and prod excluded; the new list is held back.
	release := srv.holdLists()
	excluded.set("prod")
	change, changed := s.RelistExcluding()
	if !changed || !slices.Equal(change.Before, []string{"batch"}) || !slices.Equal(change.After, []string{"prod"}) || change.Relisted != 1 {
		t.Fatalf("RelistExcluding = %+v, %v; want batch → prod, one cache relisted", change, changed)
	}
	select {
	case <-firstReflector:
	case <-time.After(time.Minute):
		t.Fatal("the reflector of the first list and watch did not return")
	}
	if s.cachedMetadata(deployments, "batch", "b") != nil || s.cachedMetadata(deployments, "prod", "a") != nil {
		t.Error("a lookup was answered from the cache before its new list arrived")
	}
	if c.store.covers("batch") {
		t.Error("the cache answers for batch before it has listed it")
	}
	release()

	waitUntil(t, "the new list", func() bool { return s.cachedMetadata(deployments, "batch", "b") != nil })
	if keys := cachedKeys(c); !slices.Equal(keys, []string{"batch/b"}) {
		t.Errorf("the cache holds %v, want batch/b only", keys)
	}
	if s.cachedMetadata(deployments, "prod", "a") != nil {
		t.Error("prod/a, now excluded, is answered from the cache")
	}
	waitUntil(t, "the old watch to end", func() bool { _, open := srv.fieldSelectors(); return open == 1 })
	selectors, _ := srv.fieldSelectors()
	if last := selectors[len(selectors)-1]; last != "metadata.namespace!=prod" {
		t.Errorf("the new watch's field selector is %q, want metadata.namespace!=prod (all: %q)", last, selectors)
	}
	waitUntil(t, "one goroutine decoding a watch of children", func() bool { return goroutinesIn("(*storeWritingDecoder).Decode") == 1 })
	waitUntil(t, "one reflector", func() bool { return goroutinesIn("(*Reflector).RunWithContext") == 1 })
	seen.mu.Lock()
	forgot := slices.Clone(seen.forgot)
	seen.mu.Unlock()
	if len(forgot) > 0 {
		t.Errorf("the observers were told %v were deleted; they left the cache only because prod is now excluded", forgot)
	}
	opened := srv.watchesOpened()
	if _, changed := s.RelistExcluding(); changed {
		t.Error("reading the same excluded namespaces again relisted")
	}
	time.Sleep(200 * time.Millisecond)
	if n := srv.watchesOpened(); n != opened {
		t.Errorf("%d watches opened after reading the same excluded namespaces again, want %d", n, opened)
	}
}

// A server that refuses the field selector (an aggregated API server may
// not take metadata.namespace) gets the list and watch without it: the
// cache syncs, holding every namespace, and still answers for none it
// was to leave out.
func TestChildCacheListsEverythingWhenTheSelectorIsRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := newChildServer(t, childIn("prod", "a"), childIn("batch", "b"))
	srv.refusesSelectors = true
	excluded := &excludedNamespaces{}
	excluded.set("batch")
	s := srv.storeExcluding(ctx, excluded)
	syncCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	if err := s.WaitForMetadataSync(syncCtx, deployments); err != nil {
		t.Fatal(err)
	}
	c := s.childCacheFor(deployments)
	if keys := cachedKeys(c); !slices.Equal(keys, []string{"batch/b", "prod/a"}) {
		t.Errorf("the cache holds %v, want both children", keys)
	}
	if s.cachedMetadata(deployments, "prod", "a") == nil || s.cachedMetadata(deployments, "batch", "b") != nil {
		t.Error("the cache does not answer for prod, or answers for the excluded batch")
	}
	selectors, _ := srv.fieldSelectors()
	if len(selectors) < 2 || selectors[0] != "metadata.namespace!=batch" || selectors[len(selectors)-1] != "" {
		t.Errorf("field selectors asked %q, want the exclusion first and none once it was refused", selectors)
	}
}
