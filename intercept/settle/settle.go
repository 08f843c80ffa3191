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
// Pure apart from Memory, which is a concurrency-safe map.
package settle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// SpecHash identifies the desired state of obj: everything outside
// apiVersion, kind, metadata and status. encoding/json sorts map keys, so
// equal specs hash alike.
func SpecHash(obj *unstructured.Unstructured) string {
	if obj == nil {
		return ""
	}
	spec := make(map[string]interface{}, len(obj.Object))
	for k, v := range obj.Object {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
		default:
			spec[k] = v
		}
	}
	data, err := json.Marshal(spec)
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

// DefaultMaxRemembered bounds Memory: past it, an arbitrary entry is
// forgotten, which makes that parent's next decision lenient.
const DefaultMaxRemembered = 200000

// entry is what Memory knows of one object.
type entry struct {
	// settled is the spec hash the object last settled at ("" = never seen
	// settled).
	settled string
	// current is the spec hash last seen, first seen at generation since.
	current string
	since   int64
	// newest is the highest generation seen.
	newest int64
	// moved: a spec other than settled was seen after the object settled,
	// so a return to the settled spec (a rollback) is a change being
	// carried out, not a settled parent.
	moved bool
	// seen is the view of the object at resourceVersion seen.rv: the same
	// version of an object is assessed again on every write under it.
	seen view
}

// view is what one version of an object says: its spec hash, and whether
// it is Current (why: kstatus's message).
type view struct {
	rv      string
	hash    string
	current bool
	why     string
}

// Memory remembers, per object UID, the spec hash at which the object last
// settled, and since which generation it has had its current spec. After a
// restart it knows nothing.
type Memory struct {
	mu  sync.Mutex
	m   map[types.UID]*entry
	max int
}

// NewMemory returns an empty Memory holding at most max entries (0: the
// default).
func NewMemory(max int) *Memory {
	if max <= 0 {
		max = DefaultMaxRemembered
	}
	return &Memory{m: map[types.UID]*entry{}, max: max}
}

// Observe learns from obj as a cache sees it change.
func (m *Memory) Observe(obj *unstructured.Unstructured) {
	if m == nil || obj == nil || obj.GetUID() == "" {
		return
	}
	v := m.view(obj)
	m.learn(obj.GetUID(), v, obj.GetGeneration())
}

// view computes what obj says, or takes it from the last time this
// version of obj was seen: a resourceVersion names one content.
func (m *Memory) view(obj *unstructured.Unstructured) view {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	if rv != "" {
		m.mu.Lock()
		e, ok := m.m[uid]
		if ok && e.seen.rv == rv {
			v := e.seen
			m.mu.Unlock()
			return v
		}
		m.mu.Unlock()
	}
	v := view{rv: rv, hash: SpecHash(obj)}
	v.current, v.why = Current(obj)
	return v
}

// Forget drops what is known of uid (the object was deleted).
func (m *Memory) Forget(uid types.UID) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.m, uid)
	m.mu.Unlock()
}

// learn records one sighting of an object, whose version says v, and
// returns a copy of its entry.
func (m *Memory) learn(uid types.UID, v view, generation int64) entry {
	hash, current := v.hash, v.current
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[uid]
	if !ok {
		if len(m.m) >= m.max {
			for k := range m.m {
				delete(m.m, k)
				break
			}
		}
		e = &entry{current: hash, since: generation}
		m.m[uid] = e
	}
	if v.rv != "" {
		e.seen = v
	}
	if generation > 0 && generation < e.newest && hash != e.current {
		// A spec older than one already seen, delivered late by a cache
		// that trails (an informer's backlog, or a decision reading the
		// cached parent): it tells nothing about the object now, and
		// taking it would undo a settlement learned since, such as one
		// from a status write the proxy forwarded itself.
		return *e
	}
	e.newest = max(e.newest, generation)
	if e.current != hash {
		e.current, e.since = hash, generation
		if e.settled != "" && hash != e.settled {
			e.moved = true
		}
	}
	if generation > 0 && generation < e.since {
		// A sighting older than one already seen (a slow cache): the spec
		// was there earlier.
		e.since = generation
	}
	if current {
		e.settled, e.moved = hash, false
	}
	return *e
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
}

// Assess returns the facts about parent and learns from it.
func (m *Memory) Assess(parent *unstructured.Unstructured) Facts {
	v := m.view(parent)
	now, why := v.current, v.why
	e := m.learn(parent.GetUID(), v, parent.GetGeneration())
	f := Facts{SpecSince: e.since, Known: e.settled != ""}
	switch {
	case now:
		f.AtCurrentSpec = true
		f.Reason = "is settled at its current spec (" + why + ")"
	case e.settled == "":
		f.Reason = "has not been seen settled since the proxy started, and is not settled now (" + why + "): lenient"
	case e.settled == e.current && !e.moved:
		f.AtCurrentSpec = true
		f.Reason = "has not changed its spec since it last settled (now " + why + ")"
	case e.settled == e.current:
		f.Reason = "returned to a spec it had settled at before, and is carrying it out (" + why + ")"
	default:
		f.Reason = "changed its spec since it last settled, and is carrying the change out (" + why + ")"
	}
	return f
}
