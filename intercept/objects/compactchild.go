package objects

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// compactChild is a child as its cache holds it: the identity the cache
// keys and indexes it by, and its lean metadata as protobuf. Children are
// the bulk of what the proxy caches, and the garbage collector scans every
// pointer the heap holds each cycle, so its cost per watch event grew with
// the children cached: bytes without pointers are not scanned.
type compactChild struct {
	namespace, name string
	uid             types.UID
	protobuf        []byte
}

// compactChildOf is the transform of the caches of children: LeanChild,
// then the metadata kept as protobuf. Anything else (a tombstone) passes
// through.
func compactChildOf(obj interface{}) (interface{}, error) {
	lean, err := LeanChild(obj)
	if err != nil {
		return nil, err
	}
	m, ok := lean.(*metav1.PartialObjectMetadata)
	if !ok {
		return lean, nil
	}
	data, err := m.ObjectMeta.Marshal()
	if err != nil {
		return nil, fmt.Errorf("keeping the metadata of %s/%s as protobuf: %w", m.Namespace, m.Name, err)
	}
	return &compactChild{namespace: m.Namespace, name: m.Name, uid: m.UID, protobuf: data}, nil
}

// metadata decodes c.
func (c *compactChild) metadata() (*metav1.PartialObjectMetadata, error) {
	m := &metav1.PartialObjectMetadata{}
	if err := m.ObjectMeta.Unmarshal(c.protobuf); err != nil {
		return nil, fmt.Errorf("decoding the cached metadata of %s/%s: %w", c.namespace, c.name, err)
	}
	return m, nil
}

// GetObjectMeta is c's identity: what the cache's key and namespace index
// read (meta.Accessor), and what an observer of metadata gets.
func (c *compactChild) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: c.namespace, Name: c.name, UID: c.uid}
}

// GetObjectKind: a cache of children holds one resource, so no kind is
// kept per object.
func (c *compactChild) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns c itself: it is never modified once cached.
func (c *compactChild) DeepCopyObject() runtime.Object { return c }

// cachedChild is the compactChild a cache of children delivers as obj, a
// tombstone's included.
func cachedChild(obj interface{}) (*compactChild, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c, ok := obj.(*compactChild)
	return c, ok
}
