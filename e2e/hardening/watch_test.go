//go:build hardening

package hardening

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// watcher holds one watch of a namespace's Tallies open through one
// replica, as an informer does: list, watch from the list's
// resourceVersion, and after the stream ends watch again from the last
// resourceVersion seen (list again when it has expired).
type watcher struct {
	client    dynamic.ResourceInterface
	replica   int
	opened    chan struct{}
	openOnce  sync.Once
	events    atomic.Int64
	rewatches atomic.Int64
	relists   atomic.Int64

	mu   sync.Mutex
	seen map[string]bool
}

func newWatcher(c *controller, replica int, counts *counters) (*watcher, error) {
	cfg := env.replicas[replica].through(c.base)
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, counters: counts} })
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &watcher{client: dyn.Resource(tallyGVR).Namespace(c.ns), replica: replica, opened: make(chan struct{}), seen: map[string]bool{}}, nil
}

func (w *watcher) saw(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[name]
}

func (w *watcher) run(ctx context.Context) {
	rv := ""
	first := true
	for ctx.Err() == nil {
		if rv == "" {
			list, err := w.client.List(ctx, metav1.ListOptions{})
			if err != nil {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			w.relists.Add(1)
			w.mu.Lock()
			for _, item := range list.Items {
				w.seen[item.GetName()] = true
			}
			w.mu.Unlock()
			rv = list.GetResourceVersion()
		}
		stream, err := w.client.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				rv = ""
			}
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		w.openOnce.Do(func() { close(w.opened) })
		if !first {
			w.rewatches.Add(1)
		}
		first = false
		rv = w.consume(stream, rv)
	}
}

// consume reads one watch stream until it ends and returns the
// resourceVersion to resume from ("" to list again).
func (w *watcher) consume(stream watch.Interface, rv string) string {
	defer stream.Stop()
	for ev := range stream.ResultChan() {
		switch ev.Type {
		case watch.Error:
			if status := apierrors.FromObject(ev.Object); apierrors.IsGone(status) || apierrors.IsResourceExpired(status) {
				return ""
			}
			return rv
		case watch.Bookmark:
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				rv = u.GetResourceVersion()
			}
		default:
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rv = u.GetResourceVersion()
			w.events.Add(1)
			w.mu.Lock()
			w.seen[u.GetName()] = true
			w.mu.Unlock()
		}
	}
	return rv
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
