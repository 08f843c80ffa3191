package objects

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestMappingMemo(t *testing.T) {
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	deployment := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	ghosts := schema.GroupVersionResource{Group: "ghosts.example.com", Version: "v1", Resource: "ghosts"}
	ghost := schema.GroupVersionKind{Group: "ghosts.example.com", Version: "v1", Kind: "Ghost"}
	notFound := &meta.NoKindMatchError{GroupKind: ghost.GroupKind()}

	kindCalls, mappingCalls := 0, 0
	kindFor := func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
		kindCalls++
		if gvr == ghosts {
			return schema.GroupVersionKind{}, notFound
		}
		return deployment, nil
	}
	restMapping := func(gk schema.GroupKind, _ ...string) (*meta.RESTMapping, error) {
		mappingCalls++
		if gk == ghost.GroupKind() {
			return nil, notFound
		}
		return &meta.RESTMapping{Resource: deployments, GroupVersionKind: deployment, Scope: meta.RESTScopeNamespace}, nil
	}

	steps := []struct {
		name                string
		do                  func(m *mappingMemo) error
		wantKinds, wantMaps int
		wantErr             bool
	}{
		{"first kind lookup asks the mapper", func(m *mappingMemo) error { _, err := m.kindFor(deployments, kindFor); return err }, 1, 0, false},
		{"second kind lookup is remembered", func(m *mappingMemo) error { _, err := m.kindFor(deployments, kindFor); return err }, 1, 0, false},
		{"first mapping asks the mapper", func(m *mappingMemo) error { _, err := m.mapping(deployment, restMapping); return err }, 1, 1, false},
		{"second mapping is remembered", func(m *mappingMemo) error { _, err := m.mapping(deployment, restMapping); return err }, 1, 1, false},
		{"an unknown kind is asked every time", func(m *mappingMemo) error { _, err := m.mapping(ghost, restMapping); return err }, 1, 2, true},
		{"a failed mapping forgets the mappings", func(m *mappingMemo) error { _, err := m.mapping(deployment, restMapping); return err }, 1, 3, false},
		{"a failed mapping forgets the kinds", func(m *mappingMemo) error { _, err := m.kindFor(deployments, kindFor); return err }, 2, 3, false},
		{"the kind is remembered again", func(m *mappingMemo) error { _, err := m.kindFor(deployments, kindFor); return err }, 2, 3, false},
		{"an unknown resource is asked every time", func(m *mappingMemo) error { _, err := m.kindFor(ghosts, kindFor); return err }, 3, 3, true},
		{"a failed kind lookup forgets the kinds", func(m *mappingMemo) error { _, err := m.kindFor(deployments, kindFor); return err }, 4, 3, false},
		{"a failed kind lookup forgets the mappings", func(m *mappingMemo) error { _, err := m.mapping(deployment, restMapping); return err }, 4, 4, false},
	}
	m := newMappingMemo()
	for _, st := range steps {
		err := st.do(m)
		if (err != nil) != st.wantErr || (err != nil && !errors.Is(err, notFound) && !meta.IsNoMatchError(err)) {
			t.Fatalf("%s: error %v, want error %v", st.name, err, st.wantErr)
		}
		if kindCalls != st.wantKinds || mappingCalls != st.wantMaps {
			t.Fatalf("%s: the mapper was asked %d kinds and %d mappings, want %d and %d", st.name, kindCalls, mappingCalls, st.wantKinds, st.wantMaps)
		}
	}
}
