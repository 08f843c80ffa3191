package objects

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

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
// through the proxy, the whole of the client's side: read from a TLS
// connection over HTTP/1.1 (chunked), decoded, through the reflector into
// the cache, to the store's observers. Events come one at a time, as they
// do from a cluster's other controllers: each one wakes every goroutine it
// passes through. The time includes the server's writing the event, the
// same in any build.
func BenchmarkChildWatchEvent(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const children = 1000
	stored := make([]*metav1.PartialObjectMetadata, children)
	for i := range stored {
		stored[i] = storedReplicaSetMetadata(i)
	}
	srv := newChildServer(b, stored...)
	s := srv.store(ctx)
	seen := &countingObserver{heard: make(chan struct{}, 1)}
	s.AddObserver(seen)
	waitCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	if err := s.WaitForMetadataSync(waitCtx, deployments); err != nil {
		b.Fatal(err)
	}
	for seen.changes.Load() < children {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-seen.heard:
	default:
	}
	frames := make([][]byte, b.N)
	for i := range frames {
		m := stored[i%children].DeepCopy()
		m.ResourceVersion = fmt.Sprint(200000 + i)
		frames[i] = watchFrame(b, watch.Modified, m)
	}
	measureEvents(b, frames, srv.send, seen.heard)
}

// measureEvents sends each frame and waits until an observer has heard of
// it, one event at a time, as they come from a cluster's controllers.
func measureEvents(b *testing.B, frames [][]byte, send func(frame []byte, last bool), heard <-chan struct{}) {
	b.ReportAllocs()
	b.ResetTimer()
	cpuBefore := processCPU(b)
	for _, f := range frames {
		send(f, false)
		<-heard
	}
	b.StopTimer()
	// The machines these run on are shared: CPU time, the server's
	// included, moves less with the load than the time per event does.
	b.ReportMetric(float64(processCPU(b)-cpuBefore)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has spent, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
