package stackgrow

import (
	"sync"
	"testing"
)

// deep stands for the write path: a chain of calls with large frames,
// about 20 KiB of stack in all.
//
//go:noinline
func deep(n int) byte {
	var frame [1 << 10]byte
	if n == 0 {
		return frame[n]
	}
	return deep(n-1) + frame[n]
}

// BenchmarkFreshGoroutine runs the deep chain on a new goroutine per
// operation, as a request is served: growing the stack on the way down,
// or once up front.
func BenchmarkFreshGoroutine(b *testing.B) {
	for _, c := range []struct {
		name string
		grow func()
	}{
		{"GrowOnTheWay", func() {}},
		{"To8K", To8K},
		{"To32K", To32K},
		{"To8KThenTo32K", func() { To8K(); To32K() }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var wg sync.WaitGroup
			for b.Loop() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.grow()
					_ = deep(20)
				}()
				wg.Wait()
			}
		})
	}
}

func TestGrowKeepsWorking(t *testing.T) {
	done := make(chan byte)
	go func() {
		To8K()
		To32K()
		To8K()
		done <- deep(40)
	}()
	if got := <-done; got != 0 {
		t.Fatalf("deep = %d", got)
	}
}
