package sidewrites

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// DefaultMaxDeferred bounds the targets with a deferred write waiting: one
// entry per object whose status was written without a resourceVersion in
// the last delay. Beyond it a write is dropped, as a restart drops what
// waits: the record then stays behind, and its parent unsettled (lenient),
// until a later status write finds room. Made at once instead, it could
// settle a parent at a spec its controller has not acted on, whose
// controller would then be refused for good; memory stays bounded
// whatever the callers write. Past half of it, a writer's write waits only
// while the writer has fewer waiting than its share of that half (divided
// among the writers with writes waiting): one status writer that writes
// without resourceVersion across many objects cannot push out the
// records of the others, whose parents would stay unsettled (lenient).
const DefaultMaxDeferred = 10000

// Deferred makes the side writes a decision defers (decision.SideWrite
// Deferred) once their Delay has passed since the write that asked for
// them: the written kind's delay in the config file, else the proxy's.
//
// The writer of a status write that names no resourceVersion may have
// read its object before the object's latest spec change: kube-apiserver
// applies such a write to whatever is stored. Recording the generation it
// landed on at once would settle the parent at a spec its controller has
// not acted on yet, and the controller's writes that carry it out would be
// refused as drift. After the delay, the controller has had the time to see
// the change; a parent it has not acted on by then is its own doing.
//
// One write waits per target uid. A later write for the same target with
// the same changes keeps the earlier deadline (the record is not pushed
// back by a controller that writes its status often), unless it asks for
// another delay (the kind's delay was changed in the config file): then
// the record lands that delay after the first write that asked for it.
// Other changes replace it and wait anew. What waits lives in this replica's memory: a
// restart drops it, and the record then waits for the next status write,
// which only keeps the parent unsettled (its controller's writes Expected)
// a while longer.
type Deferred struct {
	writer  Applier
	clock   clock.WithDelayedExecution
	max     int
	timeout time.Duration
	log     *zap.Logger

	mu      sync.Mutex
	pending map[types.UID]*deferredWrite
	// byWriter counts the writes waiting per writer (SideWrite.Writer).
	byWriter       map[string]int
	dropped        int
	lastDropLogged time.Time
}

// Applier makes a side write (Writer).
type Applier interface {
	Apply(ctx context.Context, sw decision.SideWrite) error
}

type deferredWrite struct {
	sw decision.SideWrite
	// asked is when the first write that asked for sw was decided: sw
	// lands sw.Delay after it.
	asked time.Time
	timer clock.Timer
	// armed counts the timers set for sw: a timer that fired while
	// another replaced it finds a newer count, and leaves sw alone.
	armed int
}

// NewDeferred returns a Deferred that makes its writes with writer, each
// bounded by timeout, once their delay has passed. max bounds the targets
// waiting (DefaultMaxDeferred when 0).
func NewDeferred(writer Applier, clk clock.WithDelayedExecution, timeout time.Duration, max int, log *zap.Logger) *Deferred {
	if max <= 0 {
		max = DefaultMaxDeferred
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Deferred{writer: writer, clock: clk, max: max, timeout: timeout, log: log, pending: map[types.UID]*deferredWrite{}, byWriter: map[string]int{}}
}

// Schedule makes sw once sw.Delay has passed. A write without a target
// uid, or with no delay, is made at once (in the background); one beyond
// the bound is dropped.
func (d *Deferred) Schedule(sw decision.SideWrite) {
	uid := sw.TargetUID
	if sw.Delay <= 0 || uid == "" {
		go d.apply(sw)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	if w, ok := d.pending[uid]; ok {
		if d.keeps(uid, w, sw, now) {
			return
		}
		w.timer.Stop()
		d.forget(uid, w)
		// A write that takes the place of another does not grow what
		// waits: it is not held to the share, which would lose both.
	} else if d.full(sw.Writer) {
		if now.Sub(d.lastDropLogged) >= time.Minute {
			d.lastDropLogged = now
			d.log.Warn("too many deferred side writes waiting; dropping new ones (their records wait for a later status write)",
				zap.String("target", sw.Target.String()), zap.Int("waiting", len(d.pending)))
		}
		d.dropped++
		return
	}
	w := &deferredWrite{sw: sw, asked: now}
	w.timer = d.clock.AfterFunc(sw.Delay, d.fire(uid, w, w.armed))
	d.pending[uid] = w
	d.byWriter[sw.Writer]++
}

// keeps reports whether w, waiting for uid, stands for sw: the same
// changes keep the earlier deadline, moved only by another delay.
func (d *Deferred) keeps(uid types.UID, w *deferredWrite, sw decision.SideWrite, now time.Time) bool {
	if !sameChanges(w.sw, sw) {
		return false
	}
	if w.sw.Delay != sw.Delay {
		// The kind's delay changed (a reload of the config file): the
		// record lands that delay after the first write that asked
		// for it, sooner or later than it would have.
		w.timer.Stop()
		w.sw.Delay = sw.Delay
		w.armed++
		w.timer = d.clock.AfterFunc(max(w.asked.Add(sw.Delay).Sub(now), 0), d.fire(uid, w, w.armed))
	}
	return true
}

// full reports whether a new write of writer finds no room: at the bound,
// or past half of it while writer has its share of that half waiting.
func (d *Deferred) full(writer string) bool {
	if len(d.pending) >= d.max {
		return true
	}
	half := d.max / 2
	if len(d.pending) < half {
		return false
	}
	writers := len(d.byWriter)
	if d.byWriter[writer] == 0 {
		writers++
	}
	return d.byWriter[writer] >= max(1, half/writers)
}

// forget drops w, waiting for uid.
func (d *Deferred) forget(uid types.UID, w *deferredWrite) {
	delete(d.pending, uid)
	if d.byWriter[w.sw.Writer]--; d.byWriter[w.sw.Writer] <= 0 {
		delete(d.byWriter, w.sw.Writer)
	}
}

// fire makes w when its timer armed fires, unless another write for uid
// has replaced it, or another timer this one, meanwhile.
func (d *Deferred) fire(uid types.UID, w *deferredWrite, armed int) func() {
	return func() {
		d.mu.Lock()
		if d.pending[uid] != w || w.armed != armed {
			d.mu.Unlock()
			return
		}
		d.forget(uid, w)
		sw := w.sw
		d.mu.Unlock()
		d.apply(sw)
	}
}

// Pending returns the value a write waiting for the target with uid sets
// key to.
func (d *Deferred) Pending(uid types.UID, key string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.pending[uid]
	if !ok {
		return "", false
	}
	v, ok := w.sw.Set[key]
	return v, ok
}

// Dropped is the number of writes dropped at the bound.
func (d *Deferred) Dropped() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

// Waiting is the number of targets with a write waiting.
func (d *Deferred) Waiting() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

func (d *Deferred) apply(sw decision.SideWrite) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	if err := d.writer.Apply(ctx, sw); err != nil {
		d.log.Warn("deferred side write failed", zap.String("target", sw.Target.String()),
			zap.Strings("reasons", sw.Reasons), zap.Error(err))
	}
}

// sameChanges reports whether a and b set and remove the same annotations
// to the same values.
func sameChanges(a, b decision.SideWrite) bool {
	if len(a.Set) != len(b.Set) || len(a.Remove) != len(b.Remove) {
		return false
	}
	for k, v := range a.Set {
		if w, ok := b.Set[k]; !ok || w != v {
			return false
		}
	}
	for i := range a.Remove {
		if a.Remove[i] != b.Remove[i] {
			return false
		}
	}
	return true
}
