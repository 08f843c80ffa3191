package objects

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// storedReplicaSetMetadata is the metadata of ReplicaSet i of a
// Deployment, as a metadata watch delivers it.
func storedReplicaSetMetadata(i int) *metav1.PartialObjectMetadata {
	yes := true
	name := fmt.Sprintf("c-%06d", i)
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "bench-scale", UID: types.UID(fmt.Sprintf("8d2f6a10-7c3b-4e5f-9a1b-%012d", i)),
		ResourceVersion: fmt.Sprint(100000 + i), Generation: 1, CreationTimestamp: metav1.Unix(1790000000, 0),
		Labels:      map[string]string{"app": "p-00001", "set": name},
		Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "p-00001",
			UID: "0f6d1c3e-8a52-4c1e-9b3a-000000000001", Controller: &yes, BlockOwnerDeletion: &yes}},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:deployment.kubernetes.io/revision":{}}}}`)}}},
	}}
	m.APIVersion, m.Kind = "meta.k8s.io/v1", "PartialObjectMetadata"
	return m
}

// The compact form decodes to the metadata LeanChild keeps, and the cache
// keys and indexes it as the metadata it came from.
func TestCompactChildDecodesToTheLeanMetadata(t *testing.T) {
	in := storedReplicaSetMetadata(7)
	want, _ := LeanChild(in.DeepCopy())
	out, err := compactChildOf(in)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := out.(*compactChild)
	if !ok {
		t.Fatalf("transform gave %T", out)
	}
	got, err := c.metadata()
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.ObjectMeta, want.(*metav1.PartialObjectMetadata).ObjectMeta) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got.ObjectMeta, want.(*metav1.PartialObjectMetadata).ObjectMeta)
	}
	if key, err := cache.MetaNamespaceKeyFunc(c); err != nil || key != "bench-scale/c-000007" {
		t.Errorf("key %q, %v", key, err)
	}
	if ns, err := cache.MetaNamespaceIndexFunc(c); err != nil || len(ns) != 1 || ns[0] != "bench-scale" {
		t.Errorf("namespace index %v, %v", ns, err)
	}
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(cache.DeletedFinalStateUnknown{Key: "bench-scale/c-000007", Obj: c}); err != nil || key != "bench-scale/c-000007" {
		t.Errorf("tombstone key %q, %v", key, err)
	}
	if out, err := compactChildOf("tombstone"); err != nil || out != "tombstone" {
		t.Errorf("a non-object: %v %v", out, err)
	}
}

// Reading a cached child's identity, as the cache's key function and
// namespace index do several times per watch event, allocates nothing.
func TestCompactChildIdentityReadsWithoutAllocating(t *testing.T) {
	out, _ := compactChildOf(storedReplicaSetMetadata(3))
	c := out.(*compactChild)
	var name, namespace string
	var uid types.UID
	allocs := testing.AllocsPerRun(100, func() {
		m, err := meta.Accessor(c)
		if err != nil {
			t.Fatal(err)
		}
		name, namespace, uid = m.GetName(), m.GetNamespace(), m.GetUID()
	})
	if allocs != 0 {
		t.Errorf("reading a cached child's identity allocates %.0f times, want none", allocs)
	}
	if name != "c-000003" || namespace != "bench-scale" || uid != "8d2f6a10-7c3b-4e5f-9a1b-000000000003" {
		t.Errorf("identity %s/%s %s", namespace, name, uid)
	}
}

// A cached child costs well under 1 KiB of heap, most of it bytes the
// garbage collector does not scan.
func TestCompactChildRetainsUnder1KiB(t *testing.T) {
	const n = 5000
	compact := retainedPerObject(n, func(i int) interface{} { out, _ := compactChildOf(storedReplicaSetMetadata(i)); return out })
	lean := retainedPerObject(n, func(i int) interface{} { out, _ := LeanChild(storedReplicaSetMetadata(i)); return out })
	t.Logf("retained per child: compact %.0f B, lean metadata %.0f B", compact, lean)
	if compact > 512 {
		t.Errorf("a compact child retains %.0f B, want at most 512", compact)
	}
}

func BenchmarkCompactChildMetadata(b *testing.B) {
	out, _ := compactChildOf(storedReplicaSetMetadata(1))
	c := out.(*compactChild)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.metadata(); err != nil {
			b.Fatal(err)
		}
	}
}
