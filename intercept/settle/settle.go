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
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
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
	res, err := status.Compute(obj)
	if err != nil {
		return false, "status cannot be computed: " + err.Error()
	}
	return res.Status == status.CurrentStatus, string(res.Status) + ": " + res.Message
}

// DefaultMaxRemembered bounds Memory: past it, an arbitrary entry is
// forgotten, which makes that parent's next decision lenient.
const DefaultMaxRemembered = 200000

// Memory remembers, per object UID, the spec hash at which the object last
// settled. After a restart it knows nothing.
type Memory struct {
	mu  sync.RWMutex
	m   map[types.UID]string
	max int
}

// NewMemory returns an empty Memory holding at most max entries (0: the
// default).
func NewMemory(max int) *Memory {
	if max <= 0 {
		max = DefaultMaxRemembered
	}
	return &Memory{m: map[types.UID]string{}, max: max}
}

// Observe remembers obj's spec when obj is settled at it.
func (m *Memory) Observe(obj *unstructured.Unstructured) {
	if m == nil || obj == nil || obj.GetUID() == "" {
		return
	}
	if ok, _ := Current(obj); ok {
		m.remember(obj.GetUID(), SpecHash(obj))
	}
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

func (m *Memory) remember(uid types.UID, hash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[uid]; !ok && len(m.m) >= m.max {
		for k := range m.m {
			delete(m.m, k)
			break
		}
	}
	m.m[uid] = hash
}

func (m *Memory) settledAt(uid types.UID) (string, bool) {
	if m == nil {
		return "", false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	h, ok := m.m[uid]
	return h, ok
}

// Facts are what a decision needs to know about a parent's intent.
type Facts struct {
	// AtCurrentSpec: the parent has settled at the spec it has now. A
	// controller's write is then drift.
	AtCurrentSpec bool
	// Known: the proxy has seen the parent settled (now or before).
	Known bool
	// Reason says how AtCurrentSpec was decided.
	Reason string
}

// Assess returns the facts about parent and remembers its spec if it is
// settled now.
func (m *Memory) Assess(parent *unstructured.Unstructured) Facts {
	hash := SpecHash(parent)
	now, why := Current(parent)
	if now {
		m.remember(parent.GetUID(), hash)
		return Facts{AtCurrentSpec: true, Known: true, Reason: "settled at its current spec (" + why + ")"}
	}
	at, known := m.settledAt(parent.GetUID())
	switch {
	case !known:
		return Facts{Reason: "not seen settled since the proxy started, and not settled now (" + why + "): lenient"}
	case at == hash:
		return Facts{AtCurrentSpec: true, Known: true, Reason: "its spec has not changed since it last settled (now " + why + ")"}
	default:
		return Facts{Known: true, Reason: "its spec changed since it last settled, and the change is being carried out (" + why + ")"}
	}
}
