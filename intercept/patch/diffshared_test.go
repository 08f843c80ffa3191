package patch

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

const sharedDiffDeployment = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ns","generation":3},
"spec":{"replicas":2,"paused":false,"selector":{"matchLabels":{"app":"web"}},
"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"app","image":"nginx:1"}]}}}}`

func sharedDiffOld(t testing.TB) *unstructured.Unstructured {
	t.Helper()
	old := &unstructured.Unstructured{}
	if err := old.UnmarshalJSON([]byte(sharedDiffDeployment)); err != nil {
		t.Fatal(err)
	}
	return old
}

// A merge patch's result shares what the patch left alone with the stored
// object; the desired-state diff skips shared parts and finds what a diff
// against a copy finds.
func TestDiffOfAMergePatchResult(t *testing.T) {
	old := sharedDiffOld(t)
	for _, p := range []string{
		`{"spec":{"replicas":5}}`,
		`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}}}`,
		`{"spec":{"template":{"metadata":{"labels":{"x":"y"}}}}}`,
		`{"metadata":{"labels":{"x":"y"}}}`,
		`{"spec":{"paused":true,"selector":null}}`,
		`{}`,
	} {
		shared, err := Apply(types.MergePatchType, old, []byte(p), Options{SkipTypeCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		copied := shared.DeepCopy()
		got, want := desired.Diff(old, shared), desired.Diff(old, copied)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: diff of the shared result %+v, of a copy %+v", p, got, want)
		}
	}
}

func BenchmarkDiffOfAMergePatchResult(b *testing.B) {
	old := sharedDiffOld(b)
	shared, err := Apply(types.MergePatchType, old, []byte(`{"spec":{"replicas":5}}`), Options{SkipTypeCheck: true})
	if err != nil {
		b.Fatal(err)
	}
	copied := shared.DeepCopy()
	b.Run("Shared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			desired.Diff(old, shared)
		}
	})
	b.Run("Copied", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			desired.Diff(old, copied)
		}
	})
}
