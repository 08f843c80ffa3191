package seriesmemo

import (
	"sync"
	"testing"
)

func TestForResolvesEachKeyToOneSeries(t *testing.T) {
	calls := map[string]int{}
	var mu sync.Mutex
	m := New(func(k string) *string {
		mu.Lock()
		defer mu.Unlock()
		calls[k]++
		s := "series of " + k
		return &s
	})
	first := m.For("a")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := m.For("a"); got != first {
				t.Errorf("For(a) = %p, want the first series %p", got, first)
			}
			_ = m.For("b")
		}()
	}
	wg.Wait()
	if *m.For("b") != "series of b" {
		t.Errorf("For(b) = %q", *m.For("b"))
	}
	if calls["a"] != 1 {
		t.Errorf("a resolved %d times after it was stored, want once", calls["a"])
	}
	if b1, b2 := m.For("b"), m.For("b"); b1 != b2 {
		t.Error("two lookups of b returned different series")
	}
}
