package patch

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// decodedConfigurations are the apply configurations decoded last. One
// write's configuration is read by several steps of its decision (what it
// names, its effective object, its metadata, the annotations added to
// it), and converting YAML costs more than anything else the proxy does
// for it: each is decoded once. A caller gets its own copy, which it may
// change.
var decodedConfigurations = newConfigurationMemo(64, 64<<10)

// configurationMemo remembers up to size decoded configurations of at
// most maxBytes each, the oldest forgotten first: a bound of size ×
// maxBytes of patches, and their decoded objects.
type configurationMemo struct {
	mu       sync.Mutex
	size     int
	maxBytes int
	entries  map[configurationKey]*unstructured.Unstructured
	order    []configurationKey
	next     int
}

type configurationKey struct {
	patchType types.PatchType
	patch     string
}

func newConfigurationMemo(size, maxBytes int) *configurationMemo {
	return &configurationMemo{size: size, maxBytes: maxBytes, entries: make(map[configurationKey]*unstructured.Unstructured, size)}
}

// get is a copy of patch's configuration when it is remembered.
func (m *configurationMemo) get(patchType types.PatchType, patch []byte) (*unstructured.Unstructured, bool) {
	if len(patch) > m.maxBytes {
		return nil, false
	}
	m.mu.Lock()
	cfg, ok := m.entries[configurationKey{patchType: patchType, patch: string(patch)}]
	m.mu.Unlock()
	if !ok {
		return nil, false
	}
	return cfg.DeepCopy(), true
}

// put remembers a copy of cfg as patch's configuration.
func (m *configurationMemo) put(patchType types.PatchType, patch []byte, cfg *unstructured.Unstructured) {
	if len(patch) > m.maxBytes {
		return
	}
	key := configurationKey{patchType: patchType, patch: string(patch)}
	kept := cfg.DeepCopy()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[key]; ok {
		return
	}
	if len(m.order) < m.size {
		m.order = append(m.order, key)
	} else {
		delete(m.entries, m.order[m.next])
		m.order[m.next] = key
		m.next = (m.next + 1) % m.size
	}
	m.entries[key] = kept
}
