// Package storedcopies keeps, for the objects whose writes had to be
// decided on the whole stored object, the last whole copy the proxy saw:
// the object it read live, or kube-apiserver's answer to the write it
// forwarded. Children are cached as metadata only, so without a copy every
// such write (another actor's change of a child, say) reads the child live
// first; with one, the next write of the same object at the same
// resourceVersion is decided on the copy.
//
// A copy is only as good as its resourceVersion: the caller compares it with
// the version it decides on (the cached metadata's, or the one an update
// names) and ignores a copy of any other version. Nothing here is shared
// between replicas, and nothing needs to be: a replica without the copy
// reads the object live, as before.
//
// The copies are bounded by count and by bytes, and an object larger than
// the per-object bound is not kept. Secrets are never kept: their values
// stay in the proxy's memory only for the request that reads them.
package storedcopies

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/lru"

	"github.com/kausality-io/kausality-proxy/intercept/body"
)

// Key names an object of a resource, and the kind a copy of it has.
type Key struct {
	Resource  schema.GroupVersionResource
	Kind      schema.GroupVersionKind
	Namespace string
	Name      string
}

// Copy is an object as kube-apiserver serialized it.
type Copy struct {
	Data        []byte
	ContentType string
}

// Limits bound what the copies hold.
type Limits struct {
	// Objects is the most copies kept.
	Objects int
	// Bytes is the most bytes all copies together hold.
	Bytes int
	// ObjectBytes is the largest copy kept.
	ObjectBytes int
}

// DefaultLimits hold a few thousand ordinary objects in at most 8 MiB.
var DefaultLimits = Limits{Objects: 4096, Bytes: 8 << 20, ObjectBytes: 256 << 10}

// Copies is the set of last seen whole copies, least recently used first
// out. The zero value is not usable; a nil *Copies keeps nothing.
type Copies struct {
	limits Limits

	mu    sync.Mutex
	lru   *lru.Cache
	bytes int
}

// New returns empty copies bounded by limits.
func New(limits Limits) *Copies {
	c := &Copies{limits: limits}
	// The eviction callback runs inside Add and RemoveOldest, which are
	// only called with mu held.
	c.lru = lru.NewWithEvictionFunc(limits.Objects, func(_ lru.Key, v interface{}) {
		c.bytes -= len(v.(Copy).Data)
	})
	return c
}

// Kept reports whether a copy of an object of resource r is kept at all.
func Kept(r schema.GroupVersionResource) bool {
	return r.GroupResource() != schema.GroupResource{Resource: "secrets"}
}

// Put keeps data as the last whole copy of k, replacing any older one. It
// keeps its own copy of data.
func (c *Copies) Put(k Key, data []byte, contentType string) {
	if c == nil || !Kept(k.Resource) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(k)
	if len(data) == 0 || len(data) > c.limits.ObjectBytes || len(data) > c.limits.Bytes {
		return
	}
	for c.bytes+len(data) > c.limits.Bytes && c.lru.Len() > 0 {
		c.lru.RemoveOldest()
	}
	c.bytes += len(data)
	c.lru.Add(k, Copy{Data: append([]byte(nil), data...), ContentType: contentType})
}

// Get returns the last whole copy of k. The copy's Data must not be
// modified.
func (c *Copies) Get(k Key) (Copy, bool) {
	if c == nil {
		return Copy{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.lru.Get(k)
	if !ok {
		return Copy{}, false
	}
	return v.(Copy), true
}

// Forget drops the copy of k: the object was deleted, or the copy was of
// another version than the stored one.
func (c *Copies) Forget(k Key) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(k)
}

// Bytes is what the copies hold now.
func (c *Copies) Bytes() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// At returns the copy of k if it is of resourceVersion rv, decoded. A copy
// of another version is left for the LRU to drop: resourceVersions are
// opaque, so which of two is newer is not asked.
func (c *Copies) At(k Key, rv string) (*unstructured.Unstructured, bool) {
	if c == nil || rv == "" {
		return nil, false
	}
	cp, ok := c.Get(k)
	if !ok {
		return nil, false
	}
	obj, _, err := body.Decode(cp.ContentType, cp.Data, nil)
	if err != nil {
		c.Forget(k)
		return nil, false
	}
	// A caller may ask for its answer in another shape (as=Table,
	// as=PartialObjectMetadata): such an answer is not the object.
	if obj.GroupVersionKind() != k.Kind {
		c.Forget(k)
		return nil, false
	}
	if obj.GetResourceVersion() != rv || obj.GetName() != k.Name || obj.GetNamespace() != k.Namespace {
		return nil, false
	}
	return obj, true
}

// PutObject keeps obj, serialized as JSON, as the last whole copy of k.
func (c *Copies) PutObject(k Key, obj *unstructured.Unstructured) {
	if c == nil || obj == nil || !Kept(k.Resource) {
		return
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return
	}
	c.Put(k, data, "application/json")
}
