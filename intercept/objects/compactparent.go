package objects

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/lru"
)

// compactParent is a parent as its cache holds it: the lean object as
// JSON, and beside it the identity the cache indexes it by. An unstructured
// object is a tree of Go maps, each a few hundred bytes however few its
// entries: a Deployment's is about 10 KiB, its JSON under 2 KiB. The
// parents the proxy decides writes under are decoded on demand and the
// latest of them kept decoded (decodedParents), so memory follows the
// parents written under rather than every parent of the cluster, and the
// content a decision reads is the stored object's, field for field.
type compactParent struct {
	apiVersion, kind                      string
	namespace, name, uid, resourceVersion string
	generation                            int64
	// json is the lean object as JSON; protobuf, instead, the lean object
	// of a built-in kind watched in protobuf (typedparent.go).
	json, protobuf []byte
	// bookmarkAnnotations are a bookmark's: the reflector reads from them
	// whether a watch list's initial events have ended. A parent's own
	// are in json.
	bookmarkAnnotations map[string]string
}

// compactParentOf is the transform of the caches of parents: LeanParent,
// then the object kept as JSON. Anything else (a tombstone) passes through.
func compactParentOf(obj interface{}) (interface{}, error) {
	lean, err := LeanParent(obj)
	if err != nil {
		return nil, err
	}
	u, ok := lean.(*unstructured.Unstructured)
	if !ok {
		return lean, nil
	}
	// json.Marshal returns a slice of exactly the encoding's length; an
	// encoder's buffer would keep up to twice that for as long as the
	// parent is cached.
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("keeping %s %s/%s as JSON: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return &compactParent{apiVersion: u.GetAPIVersion(), kind: u.GetKind(), namespace: u.GetNamespace(), name: u.GetName(),
		uid: string(u.GetUID()), resourceVersion: u.GetResourceVersion(), generation: u.GetGeneration(), json: data}, nil
}

// GetObjectMeta is p's identity: what the cache's key and namespace index
// read (meta.Accessor), and what an observer of metadata gets.
func (p *compactParent) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: p.namespace, Name: p.name, UID: types.UID(p.uid), ResourceVersion: p.resourceVersion,
		Generation: p.generation, Annotations: p.bookmarkAnnotations}
}

// GetObjectKind is the kind p has.
func (p *compactParent) GetObjectKind() schema.ObjectKind {
	return &metav1.TypeMeta{APIVersion: p.apiVersion, Kind: p.kind}
}

func (p *compactParent) identity() (namespace, name string, uid types.UID) {
	return p.namespace, p.name, types.UID(p.uid)
}

// DeepCopyObject returns p itself: it is never modified once cached.
func (p *compactParent) DeepCopyObject() runtime.Object { return p }

// object decodes p into a new object.
func (p *compactParent) object() (*unstructured.Unstructured, error) {
	if p.protobuf != nil {
		u, err := typedParentObject(schema.FromAPIVersionAndKind(p.apiVersion, p.kind), p.protobuf)
		if err != nil {
			return nil, fmt.Errorf("decoding the cached %s %s/%s: %w", p.kind, p.namespace, p.name, err)
		}
		return u, nil
	}
	u := &unstructured.Unstructured{}
	// util/json gives integers as int64, as every unstructured object
	// from kube-apiserver has them.
	if err := utiljson.Unmarshal(p.json, &u.Object); err != nil {
		return nil, fmt.Errorf("decoding the cached %s %s/%s: %w", p.kind, p.namespace, p.name, err)
	}
	return u, nil
}

// groupKind is the kind p has, without decoding it.
func (p *compactParent) groupKind() schema.GroupKind {
	return schema.FromAPIVersionAndKind(p.apiVersion, p.kind).GroupKind()
}

// decodedParents bounds the parents kept decoded: the ones writes were
// last decided under. A controller's burst of writes under one parent
// decodes it once.
const decodedParents = 256

// decodedKey names one cached object across the caches of parents.
type decodedKey struct {
	gvr schema.GroupVersionResource
	key string
}

// decoded is a parent as decoded at resourceVersion rv.
type decoded struct {
	uid, rv string
	obj     *unstructured.Unstructured
}

// parentMemo keeps the latest decided-under parents decoded.
type parentMemo struct{ lru *lru.Cache }

func newParentMemo() *parentMemo { return &parentMemo{lru: lru.New(decodedParents)} }

// shared returns p decoded, from the memo when it holds p's version. The
// object is shared: it must not be modified.
func (m *parentMemo) shared(gvr schema.GroupVersionResource, p *compactParent) (*unstructured.Unstructured, error) {
	k := decodedKey{gvr: gvr, key: cacheKey(p.namespace, p.name)}
	if v, ok := m.lru.Get(k); ok {
		if d := v.(decoded); d.uid == p.uid && d.rv == p.resourceVersion {
			return d.obj, nil
		}
	}
	u, err := p.object()
	if err != nil {
		return nil, err
	}
	m.lru.Add(k, decoded{uid: p.uid, rv: p.resourceVersion, obj: u})
	return u, nil
}

// cachedParentObject is the compactParent a cache of parents delivers as
// obj, a tombstone's included.
func cachedParentObject(obj interface{}) (*compactParent, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*compactParent)
	return p, ok
}
