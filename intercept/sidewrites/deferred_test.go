package sidewrites

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// appliedWrites records the side writes made, in order.
type appliedWrites struct {
	mu   sync.Mutex
	done []decision.SideWrite
	made chan struct{}
}

func newAppliedWrites() *appliedWrites { return &appliedWrites{made: make(chan struct{}, 100)} }

func (a *appliedWrites) Apply(_ context.Context, sw decision.SideWrite) error {
	a.mu.Lock()
	a.done = append(a.done, sw)
	a.mu.Unlock()
	a.made <- struct{}{}
	return nil
}

func (a *appliedWrites) values(t *testing.T, want int) []string {
	t.Helper()
	for range want {
		select {
		case <-a.made:
		case <-time.After(10 * time.Second):
			t.Fatalf("waited for %d side writes", want)
		}
	}
	select {
	case <-a.made:
		t.Fatalf("more than %d side writes", want)
	case <-time.After(50 * time.Millisecond):
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, sw := range a.done {
		out = append(out, string(sw.TargetUID)+"="+sw.Set[annotations.ObservedGeneration])
	}
	return out
}

// newTestDeferred is a Deferred with a fake clock and recorded writes.
func newTestDeferred(max int) (*Deferred, *clocktesting.FakeClock, *appliedWrites) {
	clk := clocktesting.NewFakeClock(time.Now())
	applied := newAppliedWrites()
	return NewDeferred(applied, clk, time.Second, max, nil), clk, applied
}

// testDelay is the delay of the records recordAt asks for.
const testDelay = 30 * time.Second

func recordAt(uid types.UID, generation string) decision.SideWrite {
	return recordAfter(uid, generation, testDelay)
}

func recordAfter(uid types.UID, generation string, delay time.Duration) decision.SideWrite {
	return decision.SideWrite{
		Target:            decision.ObjectRef{APIVersion: "cache.example.com/v1alpha1", Kind: "Memcached", Namespace: "ns", Name: string(uid)},
		AnnotationChanges: decision.AnnotationChanges{Set: map[string]string{annotations.ObservedGeneration: generation}},
		Seen:              map[string]string{annotations.ObservedGeneration: "1"},
		Deferred:          true, TargetUID: uid, Delay: delay,
	}
}

// A record an unbound status write asks for is made only once the delay
// has passed since the write; the same record asked for again keeps its
// deadline, another one waits anew, and each target waits on its own.
func TestDeferredRecordsWaitOutTheDelay(t *testing.T) {
	const delay = testDelay
	t.Run("made only once the delay has passed", func(t *testing.T) {
		d, clk, applied := newTestDeferred(0)
		d.Schedule(recordAt("a", "2"))
		clk.Step(delay - time.Second)
		if got := applied.values(t, 0); len(got) != 0 {
			t.Fatalf("made before the delay: %v", got)
		}
		clk.Step(time.Second)
		if got := applied.values(t, 1); got[0] != "a=2" {
			t.Fatalf("made %v, want a=2", got)
		}
		if d.Waiting() != 0 {
			t.Fatalf("%d still waiting", d.Waiting())
		}
	})
	t.Run("the same record asked for again keeps the first deadline", func(t *testing.T) {
		d, clk, applied := newTestDeferred(0)
		d.Schedule(recordAt("a", "2"))
		clk.Step(20 * time.Second)
		d.Schedule(recordAt("a", "2"))
		clk.Step(10 * time.Second)
		if got := applied.values(t, 1); got[0] != "a=2" {
			t.Fatalf("made %v, want a=2 at the first deadline", got)
		}
	})
	t.Run("a newer record replaces the waiting one and waits anew", func(t *testing.T) {
		d, clk, applied := newTestDeferred(0)
		d.Schedule(recordAt("a", "2"))
		clk.Step(20 * time.Second)
		d.Schedule(recordAt("a", "3"))
		clk.Step(10 * time.Second)
		if got := applied.values(t, 0); len(got) != 0 {
			t.Fatalf("the replaced record was made: %v", got)
		}
		clk.Step(20 * time.Second)
		if got := applied.values(t, 1); got[0] != "a=3" {
			t.Fatalf("made %v, want a=3", got)
		}
	})
	t.Run("targets wait on their own", func(t *testing.T) {
		d, clk, applied := newTestDeferred(0)
		d.Schedule(recordAt("a", "2"))
		clk.Step(10 * time.Second)
		d.Schedule(recordAt("b", "5"))
		clk.Step(20 * time.Second)
		if got := applied.values(t, 1); got[0] != "a=2" {
			t.Fatalf("made %v, want only a=2", got)
		}
		clk.Step(10 * time.Second)
		if got := applied.values(t, 1); got[1] != "b=5" {
			t.Fatalf("made %v, want b=5 next", got)
		}
	})
	t.Run("beyond the bound a record is dropped, never made at once", func(t *testing.T) {
		d, clk, applied := newTestDeferred(2)
		d.Schedule(by("alice", recordAt("a", "2")))
		d.Schedule(by("bob", recordAt("b", "2")))
		d.Schedule(by("carol", recordAt("c", "2")))
		if got := applied.values(t, 0); len(got) != 0 {
			t.Fatalf("made %v at once", got)
		}
		if d.Waiting() != 2 || d.Dropped() != 1 {
			t.Fatalf("%d waiting, %d dropped; want 2 and 1", d.Waiting(), d.Dropped())
		}
		if v, ok := d.Pending("c", annotations.ObservedGeneration); ok {
			t.Fatalf("the dropped record waits: %s", v)
		}
		clk.Step(delay)
		got := applied.values(t, 2)
		if len(got) != 2 || got[0] == "c=2" || got[1] == "c=2" {
			t.Fatalf("made %v, want a=2 and b=2 only", got)
		}
	})
	t.Run("what waits is told to decisions", func(t *testing.T) {
		d, _, _ := newTestDeferred(0)
		d.Schedule(recordAt("a", "2"))
		if v, ok := d.Pending("a", annotations.ObservedGeneration); !ok || v != "2" {
			t.Fatalf("Pending = %q, %v; want 2", v, ok)
		}
		if _, ok := d.Pending("b", annotations.ObservedGeneration); ok {
			t.Fatal("a target nothing waits for has a pending record")
		}
	})
	t.Run("no delay: made at once", func(t *testing.T) {
		d, _, applied := newTestDeferred(0)
		d.Schedule(recordAfter("a", "2", 0))
		if got := applied.values(t, 1); got[0] != "a=2" {
			t.Fatalf("made %v, want a=2 at once", got)
		}
	})
	// A record asked for again with another delay (the kind's delay
	// changed in the config file) lands that delay after the first write
	// that asked for it, and only then.
	for _, tc := range []struct {
		name                  string
		first, later, between time.Duration
	}{
		{"the kind's delay lowered", time.Hour, 90 * time.Second, time.Minute},
		{"the kind's delay lowered below what has passed", time.Hour, 30 * time.Second, time.Minute},
		{"the kind's delay raised", 5 * time.Second, 2 * time.Minute, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, clk, applied := newTestDeferred(0)
			d.Schedule(recordAfter("a", "2", tc.first))
			clk.Step(tc.between)
			d.Schedule(recordAfter("a", "2", tc.later))
			if due := tc.later - tc.between; due > 0 {
				clk.Step(due - time.Second)
				if got := applied.values(t, 0); len(got) != 0 {
					t.Fatalf("made %v before %s had passed since the first write", got, tc.later)
				}
				clk.Step(time.Second)
			} else {
				clk.Step(0)
			}
			if got := applied.values(t, 1); got[0] != "a=2" {
				t.Fatalf("made %v, want a=2 %s after the first write", got, max(tc.later, tc.between))
			}
			clk.Step(tc.first)
			if got := applied.values(t, 0); len(got) != 1 {
				t.Fatalf("made %v; the first deadline made it again", got)
			}
		})
	}
	t.Run("each record waits its own delay", func(t *testing.T) {
		d, clk, applied := newTestDeferred(0)
		d.Schedule(recordAfter("slow", "2", 2*time.Minute))
		d.Schedule(recordAfter("fast", "7", 5*time.Second))
		clk.Step(5 * time.Second)
		if got := applied.values(t, 1); got[0] != "fast=7" {
			t.Fatalf("made %v, want only fast=7 after 5s", got)
		}
		clk.Step(2*time.Minute - 6*time.Second)
		if got := applied.values(t, 0); len(got) != 1 {
			t.Fatalf("made %v before the 2m delay", got)
		}
		clk.Step(time.Second)
		if got := applied.values(t, 1); got[1] != "slow=2" {
			t.Fatalf("made %v, want slow=2 after 2m", got)
		}
	})
}

// A deferred record is made only on the object it was asked for: one
// deleted and created again under the same name meanwhile gets nothing.
func TestADeferredRecordSkipsARecreatedObject(t *testing.T) {
	sw := recordAt("uid-1", "2")
	obj := func(uid types.UID) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetUID(uid)
		u.SetGeneration(2)
		u.SetAnnotations(map[string]string{annotations.ObservedGeneration: "1"})
		return u
	}
	if got := changesOn(sw, obj("uid-1")); got[annotations.ObservedGeneration] == nil || *got[annotations.ObservedGeneration] != "2" {
		t.Errorf("on the same object: %v, want the record", got)
	}
	if got := changesOn(sw, obj("uid-2")); len(got) != 0 {
		t.Errorf("on a recreated object: %v, want nothing", got)
	}
}

// by is sw asked for by writer.
func by(writer string, sw decision.SideWrite) decision.SideWrite {
	sw.Writer = writer
	return sw
}

// One status writer that writes without resourceVersion across many
// objects fills at most its share of the bound: the records of the others
// still wait out their delay and are made.
func TestDeferredRecordsAreSharedAmongWriters(t *testing.T) {
	d, clk, applied := newTestDeferred(8)
	for i := range 8 {
		d.Schedule(by("flooder", recordAt(types.UID("f"+strconv.Itoa(i)), "2")))
	}
	if d.Waiting() != 4 || d.Dropped() != 4 {
		t.Fatalf("%d waiting, %d dropped; want the flooder's half of the bound, 4, waiting", d.Waiting(), d.Dropped())
	}
	d.Schedule(by("controller", recordAt("web", "7")))
	d.Schedule(by("other", recordAt("db", "3")))
	if _, ok := d.Pending("web", annotations.ObservedGeneration); !ok {
		t.Fatal("the controller's record does not wait: the flooder pushed it out")
	}
	if _, ok := d.Pending("db", annotations.ObservedGeneration); !ok {
		t.Fatal("another writer's record does not wait")
	}
	d.Schedule(by("flooder", recordAt("f9", "2")))
	if _, ok := d.Pending("f9", annotations.ObservedGeneration); ok {
		t.Fatal("the flooder got past its share")
	}
	clk.Step(testDelay)
	if got := applied.values(t, 6); !slices.Contains(got, "web=7") || !slices.Contains(got, "db=3") {
		t.Fatalf("made %v, want web=7 and db=3 among them", got)
	}
	if d.Waiting() != 0 {
		t.Fatalf("%d still waiting after the delay", d.Waiting())
	}
	d.Schedule(by("flooder", recordAt("f10", "2")))
	if _, ok := d.Pending("f10", annotations.ObservedGeneration); !ok {
		t.Fatal("the flooder's share is not given back once its records are made")
	}
}

// A write that takes the place of one waiting for its target is not held
// to its writer's share: refused, it would leave nothing waiting there.
func TestADeferredRecordReplacedPastTheShareStillWaits(t *testing.T) {
	d, _, _ := newTestDeferred(8)
	for i := range 4 {
		d.Schedule(by("big", recordAt(types.UID("p"+strconv.Itoa(i)), "2")))
	}
	d.Schedule(by("other", recordAt("q", "5")))
	d.Schedule(by("big", recordAt("p0", "3")))
	if v, ok := d.Pending("p0", annotations.ObservedGeneration); !ok || v != "3" {
		t.Fatalf("p0 waits with %q (%v), want the newer record 3", v, ok)
	}
	if d.Waiting() != 5 || d.Dropped() != 0 {
		t.Fatalf("%d waiting, %d dropped; want 5 and 0", d.Waiting(), d.Dropped())
	}
}
