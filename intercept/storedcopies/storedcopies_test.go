package storedcopies

import (
	"bytes"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

var replicaSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}

var replicaSet = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}

func key(name string) Key {
	return Key{Resource: replicaSets, Kind: replicaSet, Namespace: "ns", Name: name}
}

func TestCopiesAreBounded(t *testing.T) {
	tests := []struct {
		name   string
		limits Limits
		puts   []string // name=size
		sizes  map[string]int
		want   []string
	}{
		{name: "the least recently used copy goes first when the count is reached",
			limits: Limits{Objects: 2, Bytes: 1 << 20, ObjectBytes: 1 << 20},
			puts:   []string{"a", "b", "c"}, sizes: map[string]int{"a": 10, "b": 10, "c": 10},
			want: []string{"b", "c"}},
		{name: "the oldest copies go when the bytes are reached",
			limits: Limits{Objects: 10, Bytes: 25, ObjectBytes: 25},
			puts:   []string{"a", "b", "c"}, sizes: map[string]int{"a": 10, "b": 10, "c": 10},
			want: []string{"b", "c"}},
		{name: "an object larger than the per-object bound is not kept, and drops its older copy",
			limits: Limits{Objects: 10, Bytes: 100, ObjectBytes: 20},
			puts:   []string{"a", "big"}, sizes: map[string]int{"a": 10, "big": 21},
			want: []string{"a"}},
		{name: "a newer copy replaces the older one and counts once",
			limits: Limits{Objects: 10, Bytes: 25, ObjectBytes: 25},
			puts:   []string{"a", "a", "b"}, sizes: map[string]int{"a": 10, "b": 10},
			want: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.limits)
			for _, n := range tt.puts {
				c.Put(key(n), bytes.Repeat([]byte("x"), tt.sizes[n]), "application/json")
			}
			var got []string
			total := 0
			for _, n := range []string{"a", "b", "c", "big"} {
				if cp, ok := c.Get(key(n)); ok {
					got = append(got, n)
					total += len(cp.Data)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("kept %v, want %v", got, tt.want)
			}
			if c.Bytes() != total {
				t.Errorf("Bytes() = %d, the copies hold %d", c.Bytes(), total)
			}
			if total > tt.limits.Bytes {
				t.Errorf("the copies hold %d bytes, more than %d", total, tt.limits.Bytes)
			}
		})
	}
}

func TestSecretsAreNeverKept(t *testing.T) {
	c := New(DefaultLimits)
	k := Key{Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: "ns", Name: "s"}
	c.Put(k, []byte(`{"data":{"password":"aHVudGVyMg=="}}`), "application/json")
	if _, ok := c.Get(k); ok || c.Bytes() != 0 {
		t.Fatalf("a Secret was kept (%d bytes)", c.Bytes())
	}
}

func TestPutKeepsItsOwnCopy(t *testing.T) {
	c := New(DefaultLimits)
	data := []byte(`{"a":1}`)
	c.Put(key("a"), data, "application/json")
	data[0] = 'X'
	cp, ok := c.Get(key("a"))
	if !ok || string(cp.Data) != `{"a":1}` {
		t.Fatalf("Get = %q, %v: the copy changed with the caller's buffer", cp.Data, ok)
	}
}

func TestForget(t *testing.T) {
	c := New(DefaultLimits)
	c.Put(key("a"), []byte(`{}`), "application/json")
	c.Forget(key("a"))
	if _, ok := c.Get(key("a")); ok || c.Bytes() != 0 {
		t.Fatalf("a forgotten copy is still kept (%d bytes)", c.Bytes())
	}
	var none *Copies
	none.Put(key("a"), []byte(`{}`), "application/json")
	if _, ok := none.Get(key("a")); ok {
		t.Fatal("nil copies kept something")
	}
}

func TestAtReturnsOnlyTheVersionAskedFor(t *testing.T) {
	rs := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]interface{}{"name": "a", "namespace": "ns", "resourceVersion": "7"},
		"spec":     map[string]interface{}{"minReadySeconds": int64(3)},
	}}
	protobufRS, err := runtime.Encode(clientgoscheme.Codecs.EncoderForVersion(protobufSerializer(t), appsv1.SchemeGroupVersion),
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "8"}, Spec: appsv1.ReplicaSetSpec{MinReadySeconds: 4}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		put     func(c *Copies)
		key     Key
		rv      string
		wantMRS int64
		wantOK  bool
	}{
		{name: "the version asked for", put: func(c *Copies) { c.PutObject(key("a"), rs) }, key: key("a"), rv: "7", wantMRS: 3, wantOK: true},
		{name: "another version", put: func(c *Copies) { c.PutObject(key("a"), rs) }, key: key("a"), rv: "8"},
		{name: "no version asked", put: func(c *Copies) { c.PutObject(key("a"), rs) }, key: key("a"), rv: ""},
		{name: "another namespace's object under the key", put: func(c *Copies) {
			k := key("a")
			k.Namespace = "other"
			data, _ := rs.MarshalJSON()
			c.Put(k, data, "application/json")
		}, key: Key{Resource: replicaSets, Kind: replicaSet, Namespace: "other", Name: "a"}, rv: "7"},
		{name: "an answer the caller asked for in another shape is not the object", put: func(c *Copies) {
			c.Put(key("a"), []byte(`{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}`),
				"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
		}, key: key("a"), rv: "7"},
		{name: "kube-apiserver's protobuf answer", put: func(c *Copies) {
			c.Put(key("a"), protobufRS, runtime.ContentTypeProtobuf)
		}, key: key("a"), rv: "8", wantMRS: 4, wantOK: true},
		{name: "an answer that does not decode is dropped", put: func(c *Copies) {
			c.Put(key("a"), []byte("{"), "application/json")
		}, key: key("a"), rv: "7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(DefaultLimits)
			tt.put(c)
			got, ok := c.At(tt.key, tt.rv)
			if ok != tt.wantOK {
				t.Fatalf("At(%q) ok = %v, want %v", tt.rv, ok, tt.wantOK)
			}
			if !ok {
				return
			}
			if mrs, _, _ := unstructured.NestedInt64(got.Object, "spec", "minReadySeconds"); mrs != tt.wantMRS {
				t.Errorf("spec.minReadySeconds = %d, want %d", mrs, tt.wantMRS)
			}
			got.Object["spec"] = nil
			if again, ok := c.At(tt.key, tt.rv); !ok || again.Object["spec"] == nil {
				t.Error("changing what At returned changed the kept copy")
			}
		})
	}
}

func protobufSerializer(t *testing.T) runtime.Serializer {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(clientgoscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	return info.Serializer
}
