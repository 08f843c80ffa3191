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
	m := &mappingMemo{}
	m.forget()
	return m
}

func (m *mappingMemo) forget() {
	m.mu.Lock()
	m.kinds = map[schema.GroupVersionResource]schema.GroupVersionKind{}
	m.mappings = map[schema.GroupVersionKind]*meta.RESTMapping{}
	m.mu.Unlock()
}

func (m *mappingMemo) kindFor(gvr schema.GroupVersionResource, lookup func(schema.GroupVersionResource) (schema.GroupVersionKind, error)) (schema.GroupVersionKind, error) {
	m.mu.RLock()
	gvk, ok := m.kinds[gvr]
	m.mu.RUnlock()
	if ok {
		return gvk, nil
	}
	gvk, err := lookup(gvr)
	if err != nil {
		m.forget()
		return gvk, err
	}
	m.mu.Lock()
	m.kinds[gvr] = gvk
	m.mu.Unlock()
	return gvk, nil
}

// mapping returns a mapping shared by every caller: it must not be
// modified.
func (m *mappingMemo) mapping(gvk schema.GroupVersionKind, lookup func(schema.GroupKind, ...string) (*meta.RESTMapping, error)) (*meta.RESTMapping, error) {
	m.mu.RLock()
	rm, ok := m.mappings[gvk]
	m.mu.RUnlock()
	if ok {
		return rm, nil
	}
	rm, err := lookup(gvk.GroupKind(), gvk.Version)
	if err != nil {
		m.forget()
		return rm, err
	}
	m.mu.Lock()
	m.mappings[gvk] = rm
	m.mu.Unlock()
	return rm, nil
}
