package objects

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// arrivals says that a parent's event reached the observers.
type arrivals struct {
	mu    sync.Mutex
	n     int
	heard chan struct{}
}

func (a *arrivals) ObserveMetadata(metav1.Object) {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
	select {
	case a.heard <- struct{}{}:
	default:
	}
}

func (a *arrivals) Observe(*unstructured.Unstructured) {}
func (a *arrivals) Forget(types.UID)                   {}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// BenchmarkParentWatchEvent is one watch event of a parent nobody writes
// under, the whole of the client's side: read from a TLS connection over
// HTTP/1.1 (chunked), decoded, through the informer into the cache, to
// the store's observers (one that learns from the parent, decoding it).
// "decoded" is the dynamic client's watch; "one-pass" the watch of the
// caches' own connections, which decodes each event in one pass;
// "protobuf" the watch of a built-in kind, in protobuf. Events come one
// at a time, as they do from a cluster's other controllers.
func BenchmarkParentWatchEvent(b *testing.B) {
	for _, tc := range []struct {
		name          string
		dynamicClient bool
		protobuf      bool
	}{{"decoded", true, false}, {"one-pass", false, false}, {"protobuf", false, true}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const parents = 1000
			stored := make([][]byte, parents)
			for i := range stored {
				stored[i] = storedDeploymentJSON(i, 1000+i)
			}
			srv := newParentServer(b, stored...)
			s := srv.store(ctx)
			if tc.dynamicClient {
				s.parentWatch = nil
			}
			if tc.protobuf {
				s.typedParents = func(schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
					return appsv1.SchemeGroupVersion.WithKind("Deployment"), true
				}
				s.protobufServed = func() bool { return true }
			}
			// What learns from every parent in the proxy: the settledness
			// memory. The observer after it only says an event arrived.
			settled := settle.NewMemory(0, time.Now)
			settled.AddParentKind(appsv1.SchemeGroupVersion.WithKind("Deployment").GroupKind())
			s.AddObserver(settled)
			seen := &arrivals{heard: make(chan struct{}, 1)}
			s.AddObserver(seen)
			waitCtx, done := context.WithTimeout(ctx, time.Minute)
			defer done()
			if err := s.WaitForSync(waitCtx, deployments); err != nil {
				b.Fatal(err)
			}
			waitUntil(b, "the observer to hear of every parent", func() bool { return seen.count() >= parents })
			select {
			case <-seen.heard:
			default:
			}
			frames := make([][]byte, b.N)
			for i := range frames {
				frames[i] = parentEventFrame(watch.Modified, storedDeploymentJSON(i%parents, 200000+i))
				if tc.protobuf {
					frames[i] = typedEventFrame(b, watch.Modified, typedDeployment(b, storedDeploymentJSON(i%parents, 200000+i)))
				}
			}
			measureEvents(b, frames, srv.send, seen.heard)
		})
	}
}
