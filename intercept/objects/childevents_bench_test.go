package objects

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
)

// watchedMetadata is a metadata client whose one watch the benchmark
// feeds: what a watch event costs the cache of children, without a fake
// client's own work per event.
type watchedMetadata struct {
	metadata.Getter
	watcher *watch.FakeWatcher
}

func (w *watchedMetadata) Resource(schema.GroupVersionResource) metadata.Getter { return w }
func (w *watchedMetadata) Namespace(string) metadata.ResourceInterface          { return w }
func (w *watchedMetadata) List(context.Context, metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	return &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
}

// IsWatchListSemanticsUnSupported: the benchmark's watch sends no initial
// events, only the changes it makes.
func (w *watchedMetadata) IsWatchListSemanticsUnSupported() bool { return true }

func (w *watchedMetadata) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return w.watcher, nil
}

// countingObserver counts the changes of children it hears of, and says
// when it has heard of one.
type countingObserver struct {
	recorder
	changes atomic.Int64
	heard   chan struct{}
}

func (c *countingObserver) ObserveMetadata(metav1.Object) {
	c.changes.Add(1)
	select {
	case c.heard <- struct{}{}:
	default:
	}
}

// BenchmarkChildWatchEvent is one watch event of a child nobody writes
// through the proxy, from the watch to the store's observers. Events come
// one at a time, as they do from a cluster's other controllers: each one
// wakes every goroutine it passes through.
func BenchmarkChildWatchEvent(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &watchedMetadata{watcher: watch.NewFakeWithChanSize(1024, false)}
	s := New(ctx, nil, nil, w)
	seen := &countingObserver{heard: make(chan struct{}, 1)}
	s.AddObserver(seen)
	waitCtx, done := context.WithTimeout(ctx, 30*time.Second)
	defer done()
	if err := s.WaitForMetadataSync(waitCtx, deployments); err != nil {
		b.Fatal(err)
	}
	const children = 1000
	events := make([]*metav1.PartialObjectMetadata, children)
	for i := range events {
		events[i] = storedReplicaSetMetadata(i)
	}
	next := func(i int) *metav1.PartialObjectMetadata {
		m := events[i%children].DeepCopy()
		m.ResourceVersion = fmt.Sprint(200000 + i)
		return m
	}
	for i := range children {
		w.watcher.Add(next(i))
	}
	for seen.changes.Load() < children {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-seen.heard:
	default:
	}
	objs := make([]*metav1.PartialObjectMetadata, b.N)
	for i := range objs {
		objs[i] = next(children + i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range objs {
		w.watcher.Modify(objs[i])
		<-seen.heard
	}
}
