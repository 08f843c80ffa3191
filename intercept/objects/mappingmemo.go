package objects

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// mappingMemo remembers what discovery's mapper answered. The mapper walks
// every group the cluster serves under one lock on each lookup, and an
// intercepted write looks up its resource, its kind and its parent's kind:
// that was a visible share of a write's CPU. Only answers are kept; a
// failed lookup is asked again, and any failure forgets everything, since
// the mapper may have refreshed discovery behind it and a kind may have
// gone (a CRD version dropped).
type mappingMemo struct {
	mu       sync.RWMutex
	kinds    map[schema.GroupVersionResource]schema.GroupVersionKind
	mappings map[schema.GroupVersionKind]*meta.RESTMapping
}

func newMappingMemo() *mappingMemo {
	return &mappingMemo{
		kinds:    map[schema.GroupVersionResource]schema.GroupVersionKind{},
		mappings: map[schema.GroupVersionKind]*meta.RESTMapping{},
	}
}

func (m *mappingMemo) forget() {
	m.mu.Lock()
	clear(m.kinds)
	clear(m.mappings)
	m.mu.Unlock()
}

func (m *mappingMemo) kindFor(gvr schema.GroupVersionResource, lookup func(schema.GroupVersionResource) (schema.GroupVersionKind, error)) (schema.GroupVersionKind, error) {
	return recall(m, m.kinds, gvr, lookup)
}

// mapping returns a mapping shared by every caller: it must not be
// modified.
func (m *mappingMemo) mapping(gvk schema.GroupVersionKind, lookup func(schema.GroupKind, ...string) (*meta.RESTMapping, error)) (*meta.RESTMapping, error) {
	return recall(m, m.mappings, gvk, func(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
		return lookup(gvk.GroupKind(), gvk.Version)
	})
}

// recall answers key from table, one of m's, or asks lookup and remembers
// its answer.
func recall[K comparable, V any](m *mappingMemo, table map[K]V, key K, lookup func(K) (V, error)) (V, error) {
	m.mu.RLock()
	v, ok := table[key]
	m.mu.RUnlock()
	if ok {
		return v, nil
	}
	v, err := lookup(key)
	if err != nil {
		m.forget()
		return v, err
	}
	m.mu.Lock()
	table[key] = v
	m.mu.Unlock()
	return v, nil
}
