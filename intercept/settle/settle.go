// Package settle tells whether a parent has finished acting on its current
// spec, and remembers, per parent, the spec at which it last did.
//
// Generation numbers alone cannot tell a controller's drift from a rollout:
// the deployment controller sets observedGeneration in its first sync of a
// new template and then keeps scaling ReplicaSets for minutes. A parent is
// settled at a spec when it reports that it has finished with it:
// observedGeneration equals generation and its kstatus readiness is Current.
// A controller writing under a parent whose spec differs from the one it
// last settled at is carrying out that spec change; writing under a parent
// settled at its current spec is drift. A generation bump that changes no
// spec (a Deployment's annotation edit) is not a spec change.
//
// Pure apart from Memory, which is a concurrency-safe map that keeps what
// it learns in the cluster through a Durable, so every replica decides
// alike.
package settle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// SpecHash identifies the desired state of obj: everything outside
// apiVersion, kind, metadata and status. encoding/json sorts map keys, so
// equal specs hash alike.
func SpecHash(obj *unstructured.Unstructured) string {
	if obj == nil {
		return ""
	}
	data, err := json.Marshal(desired.Fields(obj.Object))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// Current reports whether obj says it has finished acting on its current
// spec, and why (kstatus's message).
func Current(obj *unstructured.Unstructured) (bool, string) {
	if obj == nil {
		return false, "no object"
	}
	if og, found, err := unstructured.NestedInt64(obj.Object, "status", "observedGeneration"); err == nil && found && og != obj.GetGeneration() {
		return false, "observedGeneration behind generation"
	}
	if og, behind := recordedBehind(obj); behind {
		return false, "the generation its controller last wrote status at (" + annotations.ObservedGeneration + " " + strconv.FormatInt(og, 10) + ") is behind generation " + strconv.FormatInt(obj.GetGeneration(), 10)
	}
	if cond, og, behind := conditionBehind(obj); behind {
		return false, "the " + cond + " condition observed generation " + strconv.FormatInt(og, 10) + ", behind generation " + strconv.FormatInt(obj.GetGeneration(), 10)
	}
	res, err := status.Compute(obj)
	if err != nil {
		return false, "status cannot be computed: " + err.Error()
	}
	return res.Status == status.CurrentStatus, string(res.Status) + ": " + res.Message
}

// generationConditions are the conditions whose observedGeneration
// operators report instead of status.observedGeneration (Crossplane's
// Synced and Ready, and the Ready of many kubebuilder operators). kstatus
// reads only their status, so a Ready=True written for the previous spec
// would otherwise count as settled at the new one.
var generationConditions = map[string]bool{"Ready": true, "Synced": true}

// conditionBehind reports the first generation condition whose
// observedGeneration is behind obj's generation.
func conditionBehind(obj *unstructured.Unstructured) (condition string, observed int64, behind bool) {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]interface{})
		t, _ := m["type"].(string)
		if !generationConditions[t] {
			continue
		}
		og, found, err := unstructured.NestedInt64(m, "observedGeneration")
		if err == nil && found && og < obj.GetGeneration() {
			return t, og, true
		}
	}
	return "", 0, false
}

// recordedBehind reports the observed generation the proxy recorded for an
// object that reports none itself (no status.observedGeneration, no
// generation condition), when it is behind the object's generation. Such an
// operator (the operator-sdk's samples report only an Available condition)
// says nothing about which spec its conditions describe; the generation at
// its last status write is all there is. After a spec change it has not
// written status since, so it is still acting on the change.
func recordedBehind(obj *unstructured.Unstructured) (int64, bool) {
	if _, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "observedGeneration"); found {
		return 0, false
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]interface{})
		if t, _ := m["type"].(string); generationConditions[t] {
			if _, found := m["observedGeneration"]; found {
				return 0, false
			}
		}
	}
	v, ok := obj.GetAnnotations()[annotations.ObservedGeneration]
	if !ok {
		return 0, false
	}
	og, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || og >= obj.GetGeneration() {
		return 0, false
	}
	return og, true
}

// DefaultMaxAge is how long Memory keeps a parent no cache delivered (one
// read live) after it last saw it; what the cluster records of it is read
// back when it is seen again. A parent a cache delivered is kept until
// the cache tells of its deletion: caches do not deliver an unchanged
// object again, and a quiet parent that aged out would be decided on the
// cluster's record alone, which may have given way to others.
const DefaultMaxAge = time.Hour

// Durable is where Memory keeps what it learns for every replica: a
// record it can read back when it has no entry for a parent (after a
// restart, or after the entry aged out), and a place it reports a change
// of what it knows to, to be written.
type Durable interface {
	// Lookup returns the record the cluster holds of the parent uid in
	// namespace.
	Lookup(namespace string, uid types.UID) (Record, bool)
	// Changed says Memory knows something new of uid, to be written.
	Changed(namespace string, uid types.UID)
	// Gone says uid was deleted: its record can go.
	Gone(namespace string, uid types.UID)
}

// entry is what Memory knows of one object.
type entry struct {
	namespace string
	// settled is the spec hash the object last settled at ("" = never seen
	// settled), at generation settledAt.
	settled   string
	settledAt int64
	// current is the spec hash last seen, first seen at generation since.
	current string
	since   int64
	// newest is the highest generation seen.
	newest int64
	// seen is the view of the object at resourceVersion seen.rv: the same
	// version of an object is assessed again on every write under it, and
	// every other version at seen.generation has its spec.
	seen view
	// lastSeen bounds how long an object no cache delivers is kept.
	lastSeen time.Time
	// cached: a cache of parents delivered the object. Such an entry is
	// kept for as long as the object is cached, however long it stays
	// unchanged: the caches tell of its deletion (Forget), and deliver
	// nothing again while it is unchanged.
	cached bool
}

// record is e as the cluster keeps it.
func (e *entry) record() Record {
	return Record{Settled: e.settled, SettledAt: e.settledAt, Current: e.current, Since: e.since}
}

// moved: a spec other than settled was seen after the object settled, so
// a return to the settled spec (a rollback) is a change being carried out,
// not a settled parent.
func (e *entry) moved() bool { return e.record().Moved() }

// knowledge is what a write of e's record would tell other replicas.
type knowledge struct {
	settled, current string
	since            int64
	moved            bool
}

func (e *entry) known() knowledge {
	return knowledge{settled: e.settled, current: e.current, since: e.since, moved: e.moved()}
}

// take adopts what r says beyond what e knows.
func (e *entry) take(r Record) {
	m := Merge(e.record(), r)
	e.settled, e.settledAt, e.current, e.since = m.Settled, m.SettledAt, m.Current, m.Since
	e.newest = max(e.newest, m.Since, m.SettledAt)
}

// view is what one version of an object says: its spec hash, computed at
// generation, and whether it is Current (why: kstatus's message).
type view struct {
	rv         string
	generation int64
	hash       string
	current    bool
	why        string
	// key, when set, stands for everything Current reads of the version
	// (ObserveStatus).
	key string
}

// Memory remembers, per object UID, the spec hash at which the object last
// settled, and since which generation it has had its current spec. It
// learns only from parent kinds (AddParentKind), keeps a parent it has
// not seen for maxAge at most, and, with a Durable, shares what it learns
// with every replica.
type Memory struct {
	mu          sync.Mutex
	m           map[types.UID]*entry
	parentKinds map[schema.GroupKind]bool
	maxAge      time.Duration
	now         func() time.Time
	lastSweep   time.Time
	durable     Durable
}

// NewMemory returns an empty Memory that forgets a parent not seen for
// maxAge (0: DefaultMaxAge) by the clock now.
func NewMemory(maxAge time.Duration, now func() time.Time) *Memory {
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	return &Memory{m: map[types.UID]*entry{}, parentKinds: map[schema.GroupKind]bool{}, maxAge: maxAge, now: now}
}

// SetDurable makes m read what it does not know from d and report what it
// learns to d. Call it before m is used.
func (m *Memory) SetDurable(d Durable) { m.durable = d }

// AddParentKind makes m learn from every object of kind gk its caches
// deliver, and from the parents of that kind Assess is asked about. The
// write path adds a kind when a write under a parent of it is decided
// for whom settledness matters (decision.WatchesParentKind).
func (m *Memory) AddParentKind(gk schema.GroupKind) {
	m.mu.Lock()
	m.parentKinds[gk] = true
	m.mu.Unlock()
}

// Learns reports whether m learns from objects of kind gk: a cache that
// holds objects compactly decodes one for m only then.
func (m *Memory) Learns(gk schema.GroupKind) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parentKinds[gk]
}

// Observe learns from obj as a cache sees it change, when obj is of a
// parent kind: settledness means nothing for a kind that owns nothing the
// proxy decides, and Pods alone would outnumber every parent.
func (m *Memory) Observe(obj *unstructured.Unstructured) {
	if m == nil || obj == nil || obj.GetUID() == "" {
		return
	}
	m.mu.Lock()
	parent := m.parentKinds[obj.GroupVersionKind().GroupKind()]
	m.mu.Unlock()
	if !parent {
		return
	}
	v := m.view(obj)
	m.learn(obj, v)
}

// ObserveStatus is Observe of the parent of kind gk that identity names:
// status gives it with its pod templates possibly left out (a pod template
// is most of a workload's spec, and no status reads it), whole gives it
// whole, asked only to hash the spec of a generation not hashed yet.
// statusKey, when not empty, is equal for two versions of the parent only
// if they are alike in all Current reads (generation, deletion,
// annotations, spec, status): a version whose key is the last one's says what
// that one said, and nothing is decoded for it. Most of a parent's events
// change neither its spec nor its status (a label, a managedFields
// timestamp).
func (m *Memory) ObserveStatus(identity metav1.Object, gk schema.GroupKind, statusKey string,
	status, whole func() *unstructured.Unstructured) {
	if m == nil || identity == nil || identity.GetUID() == "" {
		return
	}
	m.mu.Lock()
	parent := m.parentKinds[gk]
	var v view
	known := false
	if e, ok := m.m[identity.GetUID()]; ok && parent && statusKey != "" && e.seen.key == statusKey &&
		e.seen.generation == identity.GetGeneration() && e.seen.why != "" && identity.GetResourceVersion() != "" {
		v, known = e.seen, true
		v.rv = identity.GetResourceVersion()
	}
	m.mu.Unlock()
	if !parent {
		return
	}
	if known {
		m.learnFrom(identity, v, true)
		return
	}
	obj := status()
	if obj == nil {
		return
	}
	v, hashed := m.known(obj)
	if !hashed {
		w := whole()
		if w == nil {
			return
		}
		v.hash = SpecHash(w)
	}
	if v.why == "" {
		v.current, v.why = Current(obj)
	}
	v.key = statusKey
	m.learnFrom(obj, v, true)
}

// view computes what obj says, or takes it from the last time this
// version of obj was seen: a resourceVersion names one content.
func (m *Memory) view(obj *unstructured.Unstructured) view {
	v, hashed := m.known(obj)
	if !hashed {
		v.hash = SpecHash(obj)
	}
	if v.why == "" {
		v.current, v.why = Current(obj)
	}
	return v
}

// known is what m knows already of what obj says: all of it for a
// version it has seen (why is set), the spec hash of a generation it has
// seen (hashed).
func (m *Memory) known(obj *unstructured.Unstructured) (v view, hashed bool) {
	uid, rv, generation := obj.GetUID(), obj.GetResourceVersion(), obj.GetGeneration()
	v = view{rv: rv, generation: generation}
	if rv == "" {
		return v, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[uid]
	if !ok {
		return v, false
	}
	if e.seen.rv == rv {
		return e.seen, true
	}
	// A parent's event is mostly a status change, and hashing the spec
	// is most of its cost. kube-apiserver bumps generation whenever
	// anything the hash covers changes: for a custom resource on any
	// change outside metadata and status, for a built-in kind that
	// keeps a generation in the strategy that sets it on create and
	// bumps it on a spec change. So the hash of a generation is the
	// one taken when it was first seen, from whichever copy (cache,
	// live read) came first: copies that encode one spec differently
	// cannot make it look changed. Generation 0 (a kind that keeps
	// none) promises nothing and is always hashed.
	if generation > 0 && e.seen.generation == generation && e.seen.hash != "" {
		v.hash = e.seen.hash
		return v, true
	}
	return v, false
}

// Forget drops what is known of uid (the object was deleted).
func (m *Memory) Forget(uid types.UID) {
	if m == nil {
		return
	}
	m.mu.Lock()
	e, ok := m.m[uid]
	delete(m.m, uid)
	m.mu.Unlock()
	if ok && m.durable != nil {
		m.durable.Gone(e.namespace, uid)
	}
}

// Record returns what m knows of uid, as the cluster keeps it, and the
// parent's namespace.
func (m *Memory) Record(uid types.UID) (string, Record, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[uid]
	if !ok || e.settled == "" {
		return "", Record{}, false
	}
	return e.namespace, e.record(), true
}

// Merge adopts what another replica recorded of uid, when m holds uid;
// one it does not hold is read from the Durable when it is next seen.
func (m *Memory) Merge(uid types.UID, r Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.m[uid]; ok {
		e.take(r)
	}
}

// sweep drops the entries not seen for maxAge; m.mu is held.
func (m *Memory) sweep(now time.Time) {
	if now.Sub(m.lastSweep) < m.maxAge/4 {
		return
	}
	m.lastSweep = now
	for uid, e := range m.m {
		if !e.cached && now.Sub(e.lastSeen) > m.maxAge {
			delete(m.m, uid)
		}
	}
}

// learn records one sighting of obj, whose version says v, and returns a
// copy of its entry.
func (m *Memory) learn(obj metav1.Object, v view) entry { return m.learnFrom(obj, v, false) }

// learnFrom is learn; cached: a cache of parents delivered this sighting.
func (m *Memory) learnFrom(obj metav1.Object, v view, cached bool) entry {
	uid, generation := obj.GetUID(), obj.GetGeneration()
	hash, current := v.hash, v.current
	now := m.now()
	m.mu.Lock()
	m.sweep(now)
	e, ok := m.m[uid]
	if !ok {
		e = m.newEntry(obj, v)
		m.m[uid] = e
	}
	e.lastSeen = now
	e.cached = e.cached || cached
	before := e.known()
	m.sight(e, v, generation, hash, current)
	out := *e
	// A settlement at a generation that changed no spec (an annotation
	// edit) is not news worth a write: only the spec settled at, the
	// spec now, since when, and whether it moved after settling are.
	changed := e.settled != "" && e.known() != before
	m.mu.Unlock()
	if changed && m.durable != nil {
		m.durable.Changed(out.namespace, uid)
	}
	return out
}

// newEntry is what m starts from for obj, which it holds nothing of: what
// the cluster records of it, or nothing; m.mu is held.
func (m *Memory) newEntry(obj metav1.Object, v view) *entry {
	if m.durable != nil {
		if r, found := m.durable.Lookup(obj.GetNamespace(), obj.GetUID()); found {
			// What the cluster records comes first: this sighting is then
			// learned on top of it, as by the replica that wrote it.
			return &entry{namespace: obj.GetNamespace(), settled: r.Settled, settledAt: r.SettledAt,
				current: r.Current, since: r.Since, newest: max(r.Since, r.SettledAt)}
		}
	}
	return &entry{namespace: obj.GetNamespace(), current: v.hash, since: obj.GetGeneration()}
}

// peek is what learn would return for obj, whose version says v, without
// keeping or recording anything.
func (m *Memory) peek(obj metav1.Object, v view) entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var e entry
	if known, ok := m.m[obj.GetUID()]; ok {
		e = *known
	} else {
		e = *m.newEntry(obj, v)
	}
	m.sight(&e, v, obj.GetGeneration(), v.hash, v.current)
	return e
}

// sight applies one sighting to e; m.mu is held.
func (m *Memory) sight(e *entry, v view, generation int64, hash string, current bool) {
	if v.rv != "" {
		e.seen = v
	}
	if generation > 0 && generation < e.newest && hash != e.current {
		// A spec older than one already seen, delivered late by a cache
		// that trails (an informer's backlog, or a decision reading the
		// cached parent): it tells nothing about the object now, and
		// taking it would undo a settlement learned since, such as one
		// from a status write the proxy forwarded itself.
		return
	}
	e.newest = max(e.newest, generation)
	if e.current != hash {
		e.current, e.since = hash, generation
	}
	if generation > 0 && generation < e.since {
		// A sighting older than one already seen (a slow cache): the spec
		// was there earlier.
		e.since = generation
	}
	if current {
		e.settled = hash
		e.settledAt = max(e.settledAt, generation)
	}
}

// Facts are what a decision needs to know about a parent's intent.
type Facts struct {
	// AtCurrentSpec: the parent has settled at the spec it has now. A
	// controller's write is then drift.
	AtCurrentSpec bool
	// Known: the proxy has seen the parent settled (now or before).
	Known bool
	// SpecSince is the first generation at which the proxy saw the parent
	// with its current spec: generations from SpecSince to the parent's
	// own differ only in metadata (a Deployment bumps its generation when
	// its annotations change), so they are the same intent.
	SpecSince int64
	// Reason says how AtCurrentSpec was decided.
	Reason string
	// SettledAt is the generation at which the proxy last saw the parent
	// settled (0: never).
	SettledAt int64
}

// Assess returns the facts about parent. It learns from parent only when
// parent's kind is one m learns from (AddParentKind): a parent of another
// kind is assessed on what is known of it and what it says now, and
// nothing is kept or recorded of it. Any caller can name an object of any
// kind as its write's controller; what m keeps, and the records it writes,
// must not grow with that.
func (m *Memory) Assess(parent *unstructured.Unstructured) Facts {
	v := m.view(parent)
	now, why := v.current, v.why
	var e entry
	if m.Learns(parent.GroupVersionKind().GroupKind()) {
		e = m.learn(parent, v)
	} else {
		e = m.peek(parent, v)
	}
	f := Facts{SpecSince: e.since, Known: e.settled != "", SettledAt: e.settledAt}
	switch {
	case now:
		f.AtCurrentSpec = true
		f.Reason = "is settled at its current spec (" + why + ")"
	case e.settled == "":
		f.Reason = "has never been seen settled, and is not settled now (" + why + "): lenient"
	case e.settled == e.current && !e.moved():
		f.AtCurrentSpec = true
		f.Reason = "has not changed its spec since it last settled (now " + why + ")"
	case e.settled == e.current:
		f.Reason = "returned to a spec it had settled at before, and is carrying it out (" + why + ")"
	default:
		f.Reason = "changed its spec since it last settled, and is carrying the change out (" + why + ")"
	}
	return f
}
