package objects

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	metav1.PartialObjectMetadata
	json []byte
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
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("keeping %s %s/%s as JSON: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	p := &compactParent{json: data}
	p.APIVersion, p.Kind = u.GetAPIVersion(), u.GetKind()
	p.Name, p.Namespace, p.UID, p.ResourceVersion = u.GetName(), u.GetNamespace(), u.GetUID(), u.GetResourceVersion()
	return p, nil
}

// object decodes p into a new object.
func (p *compactParent) object() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	// util/json gives integers as int64, as every unstructured object
	// from kube-apiserver has them.
	if err := utiljson.Unmarshal(p.json, &u.Object); err != nil {
		return nil, fmt.Errorf("decoding the cached %s %s/%s: %w", p.Kind, p.Namespace, p.Name, err)
	}
	return u, nil
}

// groupKind is the kind p has, without decoding it.
func (p *compactParent) groupKind() schema.GroupKind {
	return schema.FromAPIVersionAndKind(p.APIVersion, p.Kind).GroupKind()
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
	k := decodedKey{gvr: gvr, key: cacheKey(p.Namespace, p.Name)}
	if v, ok := m.lru.Get(k); ok {
		if d := v.(decoded); d.uid == string(p.UID) && d.rv == p.ResourceVersion {
			return d.obj, nil
		}
	}
	u, err := p.object()
	if err != nil {
		return nil, err
	}
	m.lru.Add(k, decoded{uid: string(p.UID), rv: p.ResourceVersion, obj: u})
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
