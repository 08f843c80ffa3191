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
// then the metadata kept as protobuf. Anything else (a tombstone, a child
// its watch decoded compact already) passes through.
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

// compactChild is a metav1.Object itself, holding its identity only: the
// cache's key function and namespace index read it (through meta.Accessor)
// several times per watch event, and an ObjectMeta made for each read was
// most of the garbage a child's event left once decoded. The cache never
// changes a cached object, so the setters have nothing to do; the other
// fields read as unset, as the metadata of an object without them would,
// except the two a watch's reflector reads of every event it decodes
// compact: the resourceVersion it resumes from, and the annotation that
// ends the initial events of a watch list.
var _ metav1.Object = (*compactChild)(nil)

func (c *compactChild) GetNamespace() string    { return c.namespace }
func (c *compactChild) GetName() string         { return c.name }
func (c *compactChild) GetUID() types.UID       { return c.uid }
func (c *compactChild) GetGenerateName() string { return "" }

// GetResourceVersion reads it from the protobuf, "" if that is unreadable.
func (c *compactChild) GetResourceVersion() string {
	v, err := bytesField(c.protobuf, objectMetaVersion)
	if err != nil {
		return ""
	}
	return string(v)
}

// GetAnnotations decodes the protobuf; nil if that is unreadable.
func (c *compactChild) GetAnnotations() map[string]string {
	m, err := c.metadata()
	if err != nil {
		return nil
	}
	return m.Annotations
}

func (c *compactChild) GetGeneration() int64                          { return 0 }
func (c *compactChild) GetSelfLink() string                           { return "" }
func (c *compactChild) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (c *compactChild) GetDeletionTimestamp() *metav1.Time            { return nil }
func (c *compactChild) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (c *compactChild) GetLabels() map[string]string                  { return nil }
func (c *compactChild) GetFinalizers() []string                       { return nil }
func (c *compactChild) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (c *compactChild) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (c *compactChild) SetNamespace(string)                           {}
func (c *compactChild) SetName(string)                                {}
func (c *compactChild) SetUID(types.UID)                              {}
func (c *compactChild) SetGenerateName(string)                        {}
func (c *compactChild) SetResourceVersion(string)                     {}
func (c *compactChild) SetGeneration(int64)                           {}
func (c *compactChild) SetSelfLink(string)                            {}
func (c *compactChild) SetCreationTimestamp(metav1.Time)              {}
func (c *compactChild) SetDeletionTimestamp(*metav1.Time)             {}
func (c *compactChild) SetDeletionGracePeriodSeconds(*int64)          {}
func (c *compactChild) SetLabels(map[string]string)                   {}
func (c *compactChild) SetAnnotations(map[string]string)              {}
func (c *compactChild) SetFinalizers([]string)                        {}
func (c *compactChild) SetOwnerReferences([]metav1.OwnerReference)    {}
func (c *compactChild) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

// GetObjectKind: a cache of children holds one resource, so no kind is
// kept per object.
func (c *compactChild) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (c *compactChild) identity() (namespace, name string, uid types.UID) {
	return c.namespace, c.name, c.uid
}

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
