package objects

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestMetadataContentIsTheConvertersOutput(t *testing.T) {
	yes, no := true, false
	grace := int64(30)
	created := metav1.NewTime(time.Date(2026, 11, 26, 2, 3, 4, 0, time.FixedZone("x", 3600)))
	deleted := metav1.NewTime(time.Date(2026, 11, 27, 5, 6, 7, 0, time.UTC))
	tests := []struct {
		name string
		meta metav1.ObjectMeta
	}{
		{"empty", metav1.ObjectMeta{}},
		{"empty maps and lists", metav1.ObjectMeta{Name: "a", Labels: map[string]string{}, Annotations: map[string]string{},
			OwnerReferences: []metav1.OwnerReference{}, Finalizers: []string{}}},
		{"an empty owner reference", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{}}}},
		{"every field", metav1.ObjectMeta{
			Name: "rs", GenerateName: "rs-", Namespace: "ns", UID: "u-1", ResourceVersion: "42",
			SelfLink:   "/apis/x", //nolint:staticcheck // objects stored long ago may carry it, and the converter keeps it
			Generation: 7, CreationTimestamp: created, DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: &grace,
			Labels: map[string]string{"app": "web", "tier": ""}, Annotations: map[string]string{"kausality.io/trace": `[{"a":1}]`},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u-0", Controller: &yes, BlockOwnerDeletion: &yes},
				{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "u-2", Controller: &no},
			},
			Finalizers: []string{"a/b", "c"},
		}},
		{"managed fields", metav1.ObjectMeta{Name: "m", ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "kcm", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", Time: &created,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)},
		}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tt.meta)
			if err != nil {
				t.Fatal(err)
			}
			got, err := metadataContent(&tt.meta)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("metadataContent:\n%#v\nthe converter:\n%#v", got, want)
			}
		})
	}
}

func BenchmarkMetadataContent(b *testing.B) {
	yes := true
	m := &metav1.ObjectMeta{Name: "rs", Namespace: "ns", UID: "u-1", ResourceVersion: "42", Generation: 3,
		CreationTimestamp: metav1.Now(), Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u-0", Controller: &yes, BlockOwnerDeletion: &yes}}}
	b.Run("converter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = runtime.DefaultUnstructuredConverter.ToUnstructured(m)
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = metadataContent(m)
		}
	})
}
