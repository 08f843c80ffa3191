package objects

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkParentWatchEvent is one watch event of a parent nobody writes
// under, the whole of the client's side: read from a TLS connection over
// HTTP/1.1 (chunked), decoded, through the informer into the cache, to
// the store's observers (one that learns from the parent, decoding it).
// "decoded" is the dynamic client's watch; "one-pass" the watch of the
// caches' own connections, which decodes each event in one pass. Events come
// one at a time, as they do from a cluster's other controllers.
func BenchmarkParentWatchEvent(b *testing.B) {
	for _, tc := range []struct {
		name          string
		dynamicClient bool
	}{{"decoded", true}, {"one-pass", false}} {
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
			seen := newParentObserver()
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
			}
			measureEvents(b, frames, srv.send, seen.heard)
		})
	}
}
