package notify

import (
	"container/list"
	"strings"
	"sync/atomic"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// MaxOpenPerPair bounds the open drifts remembered for one (parent, child)
// pair. A controller whose writes are denied may retry with ever different
// values; beyond this many distinct open drifts the oldest is forgotten.
const MaxOpenPerPair = 8

// deliveryState of one open drift at one URL.
type deliveryState uint8

const (
	// stateNone: not delivered (never tried, dropped or failed): the next
	// occurrence of the drift queues it again.
	stateNone deliveryState = iota
	// statePending: queued or in flight.
	statePending
	// stateDelivered: acknowledged with 2xx.
	stateDelivered
)

// openDrift is a Detected report that has not been resolved. Everything but
// state and open is immutable after creation; state and open are guarded
// by Sender.mu.
type openDrift struct {
	id        string
	key       string
	parentGen int64
	// spec is the Detected spec without the objects, for the Resolved
	// report.
	spec  DriftReportSpec
	state []deliveryState // per URL
	open  bool
}

type pairEntry struct {
	key    string
	drifts []*openDrift // oldest first
	elem   *list.Element
}

func (p *pairEntry) find(id string) *openDrift {
	for _, od := range p.drifts {
		if od.id == id {
			return od
		}
	}
	return nil
}

// openTable remembers the open drifts by (parent, child) pair, bounded:
// at most maxPairs pairs (least recently reported pair evicted first) and
// MaxOpenPerPair drifts per pair (oldest evicted first). A forgotten drift
// gets no Resolved report, and the next occurrence of it is reported as
// Detected again. Not safe for concurrent use: guarded by Sender.mu.
type openTable struct {
	maxPairs int
	pairs    map[string]*pairEntry
	lru      *list.List // of *pairEntry, most recent first
	// drifts counts the open drifts; written under Sender.mu, read
	// without it (the fast path of Observe, metrics).
	drifts atomic.Int64
}

func newOpenTable(maxPairs int) *openTable {
	return &openTable{maxPairs: maxPairs, pairs: map[string]*pairEntry{}, lru: list.New()}
}

// get returns the entry of key (nil if none), marking it recently used.
func (t *openTable) get(key string) *pairEntry {
	p := t.pairs[key]
	if p != nil {
		t.lru.MoveToFront(p.elem)
	}
	return p
}

// add opens od, evicting as needed.
func (t *openTable) add(od *openDrift) {
	p := t.pairs[od.key]
	if p == nil {
		p = &pairEntry{key: od.key}
		p.elem = t.lru.PushFront(p)
		t.pairs[od.key] = p
		for len(t.pairs) > t.maxPairs {
			oldest := t.lru.Back().Value.(*pairEntry)
			for _, o := range oldest.drifts {
				o.open = false
			}
			t.drifts.Add(-int64(len(oldest.drifts)))
			t.lru.Remove(oldest.elem)
			delete(t.pairs, oldest.key)
		}
	} else {
		t.lru.MoveToFront(p.elem)
	}
	if len(p.drifts) >= MaxOpenPerPair {
		p.drifts[0].open = false
		p.drifts = p.drifts[1:]
		t.drifts.Add(-1)
	}
	od.open = true
	p.drifts = append(p.drifts, od)
	t.drifts.Add(1)
}

// remove closes od.
func (t *openTable) remove(od *openDrift) {
	if !od.open {
		return
	}
	od.open = false
	p := t.pairs[od.key]
	if p == nil {
		return
	}
	for i, o := range p.drifts {
		if o == od {
			p.drifts = append(p.drifts[:i:i], p.drifts[i+1:]...)
			t.drifts.Add(-1)
			break
		}
	}
	if len(p.drifts) == 0 {
		t.lru.Remove(p.elem)
		delete(t.pairs, p.key)
	}
}

// pairKey identifies a (parent, child) pair, by API group (not version).
func pairKey(parent, child decision.ObjectRef) string {
	var b strings.Builder
	for _, s := range [...]string{groupOf(parent.APIVersion), parent.Kind, parent.Namespace, parent.Name,
		groupOf(child.APIVersion), child.Kind, child.Namespace, child.Name} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	return b.String()
}
