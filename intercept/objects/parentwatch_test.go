package objects

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
)

// cachedParent is what the store's cache of deployments holds of name.
func cachedParent(t testing.TB, s *Store, name string) (*compactParent, bool) {
	t.Helper()
	obj, exists, err := s.parentCacheFor(deployments).indexer.GetByKey(cacheKey("bench-scale", name))
	if err != nil {
		t.Fatal(err)
	}
	if !exists {
		return nil, false
	}
	p, ok := obj.(*compactParent)
	if !ok {
		t.Fatalf("the cache holds a %T", obj)
	}
	return p, true
}

// decodedCompact is the compactParent of a parent decoded whole, as the
// dynamic client decodes it.
func decodedCompact(t testing.TB, data []byte) *compactParent {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	out, err := compactParentOf(u)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*compactParent)
}

// Over the caches' own connections, a watched parent is cached as it is
// when the dynamic client decodes it, reaches the observers decoded, and
// its deletion reaches them too; a watch that ends with 410 Gone is
// listed again.
func TestParentWatchCachesParentsAsDecodedWhole(t *testing.T) {
	for name, noWatchList := range map[string]bool{"watch list": false, "list": true} {
		t.Run(name, func(t *testing.T) { testParentWatchCachesParentsAsDecodedWhole(t, noWatchList) })
	}
}

func testParentWatchCachesParentsAsDecodedWhole(t *testing.T, noWatchList bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := newParentServer(t, storedDeploymentJSON(1, 1001), storedDeploymentJSON(2, 1002))
	srv.mu.Lock()
	srv.noWatchList = noWatchList
	srv.mu.Unlock()
	s := srv.store(ctx)
	if s.parentWatch == nil {
		t.Fatal("the store's caches do not watch parents over their own connections")
	}
	seen := newParentObserver()
	s.AddObserver(seen)
	waitCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	if err := s.WaitForSync(waitCtx, deployments); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the watch to open", func() bool { return srv.watchesOpened() > 0 })
	for _, name := range []string{"p-00001", "p-00002"} {
		if _, ok := cachedParent(t, s, name); !ok {
			t.Fatalf("%s is not cached after the sync", name)
		}
	}

	changed := bytes.Replace(storedDeploymentJSON(1, 2001), []byte(`"annotations":{`), []byte(`"labels":{"churn":"1"},"annotations":{`), 1)
	srv.send(parentEventFrame(watch.Modified, changed), false)
	waitUntil(t, "the change to reach the cache", func() bool {
		p, ok := cachedParent(t, s, "p-00001")
		return ok && p.resourceVersion == "2001"
	})
	p, _ := cachedParent(t, s, "p-00001")
	want := decodedCompact(t, changed)
	if !bytes.Equal(p.json, want.json) || p.uid != want.uid || p.kind != "Deployment" || p.apiVersion != "apps/v1" || p.bookmarkAnnotations != nil {
		t.Errorf("cached %s\nwant %s", p.json, want.json)
	}
	waitUntil(t, "the observer to hear of the change", func() bool {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		u := seen.observed["p-00001"]
		return u != nil && u.GetLabels()["churn"] == "1"
	})
	u, ok := s.GetCachedWhole(deployments, "bench-scale", "p-00001")
	if !ok {
		t.Fatal("not cached")
	}
	var decoded unstructured.Unstructured
	if err := utiljson.Unmarshal(want.json, &decoded.Object); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(u.Object, decoded.Object) {
		t.Errorf("read %v", u.Object)
	}
	// The observers are given the parent as the watch decoded it: what
	// decoding the cached JSON gives.
	seen.mu.Lock()
	observed := seen.observed["p-00001"]
	seen.mu.Unlock()
	if !equality.Semantic.DeepEqual(observed.Object, decoded.Object) {
		t.Errorf("observed %v\nwant %v", observed.Object, decoded.Object)
	}
	if mf := u.GetManagedFields(); len(mf) != 1 || mf[0].Manager != "kube-controller-manager" {
		t.Errorf("managedFields kept: %v", mf)
	}

	deletedAndGone(t, srv, s, seen, parentEventFrame(watch.Deleted, storedDeploymentJSON(2, 2002)),
		parentEventFrame(watch.Error, []byte(`{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}`)))
}

// Each event is decoded in one pass into what its cache keeps, as the
// dynamic client's watch decodes it; what that watch refuses is refused.
func TestParentEventDecoder(t *testing.T) {
	deployment := storedDeploymentJSON(7, 3001)
	for _, tc := range []struct {
		name  string
		frame string
		typ   watch.EventType
		// check looks at the decoded object.
		check   func(t *testing.T, obj interface{})
		wantErr string
	}{{
		name:  "a changed parent: compact, as decoded whole",
		frame: string(parentEventFrame(watch.Modified, deployment)),
		typ:   watch.Modified,
		check: func(t *testing.T, obj interface{}) {
			p, ok := obj.(*compactParent)
			want := decodedCompact(t, deployment)
			if !ok || !bytes.Equal(p.json, want.json) || p.name != "p-00007" || p.namespace != "bench-scale" || p.resourceVersion != "3001" || p.uid != want.uid {
				t.Errorf("decoded %+v, want %s", obj, want.json)
			}
		},
	}, {
		name:  "members in any order, numbers kept as the dynamic client keeps them",
		frame: `{"object":{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","namespace":"ns","uid":"u1","resourceVersion":"5","generation":3},"spec":{"big":12345678901234567,"ratio":0.5,"text":"\u00e9<&>"}},"type":"ADDED"}`,
		typ:   watch.Added,
		check: func(t *testing.T, obj interface{}) {
			p := obj.(*compactParent)
			want := decodedCompact(t, []byte(`{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","namespace":"ns","uid":"u1","resourceVersion":"5","generation":3},"spec":{"big":12345678901234567,"ratio":0.5,"text":"\u00e9<&>"}}`))
			if !bytes.Equal(p.json, want.json) || p.kind != "Widget" || p.apiVersion != "example.com/v1" {
				t.Errorf("decoded %s, want %s", p.json, want.json)
			}
			u, err := p.object()
			if err != nil || u.Object["spec"].(map[string]interface{})["big"] != int64(12345678901234567) {
				t.Errorf("the integer was not kept as int64: %v %v", u, err)
			}
		},
	}, {
		name:  "the bookmark that ends a watch list's initial events",
		frame: `{"type":"BOOKMARK","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}`,
		typ:   watch.Bookmark,
		check: func(t *testing.T, obj interface{}) {
			p, ok := obj.(*compactParent)
			if !ok || p.GetObjectMeta().GetResourceVersion() != "12" || p.GetObjectMeta().GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
				t.Errorf("decoded %+v", obj)
			}
		},
	}, {
		name:  "an error: its Status, as the reflector reads it",
		frame: `{"type":"ERROR","object":{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}}`,
		typ:   watch.Error,
		check: func(t *testing.T, obj interface{}) {
			if err := apierrors.FromObject(obj.(*unstructured.Unstructured)); !apierrors.IsResourceExpired(err) {
				t.Errorf("the error reads as %v, want 410 Expired", err)
			}
		},
	}, {
		name:    "an unknown event type",
		frame:   `{"type":"CHANGED","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"}}}`,
		wantErr: `unknown type "CHANGED"`,
	}, {
		name:    "the type's name in another case",
		frame:   `{"Type":"ADDED","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"}}}`,
		wantErr: `unknown type ""`,
	}, {
		name:    "no object",
		frame:   `{"type":"ADDED"}`,
		wantErr: "without its object",
	}, {
		name:    "an object that is not one",
		frame:   `{"type":"ADDED","object":[1]}`,
		wantErr: "cannot unmarshal array",
	}, {
		name:    "no kind",
		frame:   `{"type":"ADDED","object":{"apiVersion":"apps/v1","metadata":{"name":"a"}}}`,
		wantErr: "kind is missing",
	}, {
		name:    "not JSON",
		frame:   `{"type":"ADDED","object":{"kind":"Deployment",}}`,
		wantErr: "invalid character",
	}, {
		name:    "a number beyond float64",
		frame:   `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"n":1e400}}}`,
		wantErr: "1e400",
	}, {
		name:    "cut off",
		frame:   `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}`,
		wantErr: io.ErrUnexpectedEOF.Error(),
	}, {
		name:    "no event",
		frame:   "",
		wantErr: io.EOF.Error(),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newParentEventDecoder(io.NopCloser(strings.NewReader(tc.frame)))
			typ, obj, err := d.Decode()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if typ != tc.typ {
				t.Errorf("type %q, want %q", typ, tc.typ)
			}
			tc.check(t, obj)
		})
	}
}

// Events follow each other on one connection, each decoded whole, however
// the connection's reads cut them.
func TestParentEventDecoderReadsEventAfterEvent(t *testing.T) {
	stream := string(parentEventFrame(watch.Added, storedDeploymentJSON(1, 11))) + " \n" +
		string(parentEventFrame(watch.Modified, storedDeploymentJSON(2, 12))) +
		string(parentEventFrame(watch.Deleted, storedDeploymentJSON(1, 13)))
	d := newParentEventDecoder(io.NopCloser(iotest.OneByteReader(strings.NewReader(stream))))
	for _, want := range []struct {
		typ  watch.EventType
		name string
		rv   string
	}{{watch.Added, "p-00001", "11"}, {watch.Modified, "p-00002", "12"}, {watch.Deleted, "p-00001", "13"}} {
		typ, obj, err := d.Decode()
		if err != nil {
			t.Fatal(err)
		}
		p, ok := obj.(*compactParent)
		if typ != want.typ || !ok || p.name != want.name || p.resourceVersion != want.rv {
			t.Errorf("%s %+v, want %s of %s at %s", typ, obj, want.typ, want.name, want.rv)
		}
	}
	if _, _, err := d.Decode(); err != io.EOF {
		t.Errorf("after the last event: %v, want io.EOF", err)
	}
}

// One event may not be larger than the bound, however many events the
// watch sends.
func TestParentEventDecoderBoundsAnEvent(t *testing.T) {
	small := string(parentEventFrame(watch.Modified, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"1"}}`)))
	large := string(parentEventFrame(watch.Modified, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","namespace":"ns","resourceVersion":"2"},"data":{"x":"`+strings.Repeat("x", 4096)+`"}}`)))
	d := newParentEventDecoder(io.NopCloser(strings.NewReader(strings.Repeat(small, 40) + large)))
	d.max = 2048
	for i := 0; i < 40; i++ {
		if _, _, err := d.Decode(); err != nil {
			t.Fatalf("event %d of %d bytes each, %d in all: %v", i, len(small), 40*len(small), err)
		}
	}
	if _, _, err := d.Decode(); !errors.Is(err, errEventTooLarge) {
		t.Errorf("an event of %d bytes: %v, want it refused", len(large), err)
	}
}

// deploymentIn is storedDeployment number i in namespace.
func deploymentIn(namespace string, i int) []byte {
	return bytes.ReplaceAll(storedDeploymentJSON(i, 1000+i), []byte(`"namespace":"bench-scale"`), []byte(`"namespace":"`+namespace+`"`))
}

// A cache of parents of a namespaced resource leaves out the excluded
// namespaces as a cache of children does: its list and watch select
// around them, a lookup there is answered live, and a change of the
// excluded namespaces lists again. A parent that leaves only because its
// namespace became excluded is not reported deleted.
func TestParentCacheLeavesOutTheExcludedNamespaces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := newParentServer(t, deploymentIn("prod", 1), deploymentIn("kube-system", 2))
	excluded := &excludedNamespaces{}
	excluded.set("kube-system")
	s := srv.storeExcluding(ctx, excluded)
	seen := newParentObserver()
	s.AddObserver(seen)
	syncCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	if err := s.WaitForSync(syncCtx, deployments); err != nil {
		t.Fatal(err)
	}
	const without = "metadata.namespace!=kube-system"
	if selectors := srv.fieldSelectors(); len(selectors) == 0 || slices.ContainsFunc(selectors, func(s string) bool { return s != without }) {
		t.Errorf("the cache listed and watched with field selectors %q, want each %q", selectors, without)
	}
	c := s.parentCacheFor(deployments)
	if keys := cachedKeys(c); !slices.Equal(keys, []string{"prod/p-00001"}) {
		t.Errorf("the cache holds %v, want prod/p-00001 only", keys)
	}
	if _, ok := s.GetCachedWhole(deployments, "kube-system", "p-00002"); ok {
		t.Error("a parent of an excluded namespace was answered from the cache")
	}
	if _, ok := s.GetCachedWhole(deployments, "prod", "p-00001"); !ok {
		t.Error("a parent of an included namespace was not answered from the cache")
	}
	if seen.count() != 1 {
		t.Errorf("the observer heard of %d parents, want the one of prod", seen.count())
	}

	excluded.set()
	change, ok := s.RelistExcluding()
	if !ok || change.Relisted != 1 {
		t.Fatalf("RelistExcluding: %+v %v, want the cache of parents listed again", change, ok)
	}
	waitUntil(t, "the parent of kube-system in the cache", func() bool {
		_, ok := s.GetCachedWhole(deployments, "kube-system", "p-00002")
		return ok
	})
	if selectors := srv.fieldSelectors(); selectors[len(selectors)-1] != "" {
		t.Errorf("listed again with field selector %q, want none", selectors[len(selectors)-1])
	}

	excluded.set("kube-system")
	if _, ok := s.RelistExcluding(); !ok {
		t.Fatal("the exclusion of kube-system again was not followed")
	}
	waitUntil(t, "the parent of kube-system to leave the cache", func() bool {
		return slices.Equal(cachedKeys(c), []string{"prod/p-00001"}) && c.store.hasSynced()
	})
	seen.mu.Lock()
	forgot := len(seen.forgot)
	seen.mu.Unlock()
	if forgot != 0 {
		t.Errorf("the observers were told %d parents were deleted; none was", forgot)
	}
}

// deletedAndGone sends the deletion of p-00002 (deleted) and expects it to
// leave the cache and reach the observer; then a 410 Gone (gone), and
// expects the cache to list and watch again.
func deletedAndGone(t *testing.T, srv *parentServer, s *Store, seen *parentObserver, deleted, gone []byte) {
	t.Helper()
	srv.send(deleted, false)
	waitUntil(t, "the deletion to reach the observer", func() bool {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return seen.forgot[types.UID("0f6d1c3e-8a52-4c1e-9b3a-000000000002")]
	})
	if _, ok := cachedParent(t, s, "p-00002"); ok {
		t.Error("a deleted parent is still cached")
	}
	opened := srv.watchesOpened()
	srv.send(gone, false)
	waitUntil(t, "the cache to list and watch again after 410 Gone", func() bool { return srv.watchesOpened() > opened })
}
