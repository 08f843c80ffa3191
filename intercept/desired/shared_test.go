package desired

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/patch"
)

// A merge patch's result shares what the patch left alone with the stored
// object; the diff skips shared parts and finds what a diff against a
// copy finds.
func TestDiffOfSharedParts(t *testing.T) {
	old := u(t, deployment())
	for _, p := range []string{
		`{"spec":{"replicas":5}}`,
		`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}}}`,
		`{"spec":{"template":{"metadata":{"labels":{"x":"y"}}}}}`,
		`{"metadata":{"labels":{"x":"y"}}}`,
		`{"spec":{"paused":true,"selector":null}}`,
		`{}`,
	} {
		shared, err := patch.Apply(types.MergePatchType, old, []byte(p), patch.Options{SkipTypeCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		copied := shared.DeepCopy()
		got, want := Diff(old, shared), Diff(old, copied)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: diff of the shared result %+v, of a copy %+v", p, got, want)
		}
	}
	// One map or list is no change; a different one with the same content
	// is not either.
	spec := old.Object["spec"].(map[string]interface{})
	for _, c := range []struct{ a, b interface{} }{
		{spec, spec},
		{[]interface{}{"a", int64(1)}, []interface{}{"a", int64(1)}},
	} {
		d := differ{}
		d.walk(nil, c.a, c.b)
		if d.total != 0 {
			t.Errorf("%v and %v differ: %v", c.a, c.b, d.changes)
		}
	}
	list := []interface{}{"a", "b"}
	d := differ{}
	d.walk(nil, list[:1], list)
	if d.total == 0 {
		t.Error("a list and its own longer slice do not differ")
	}
}

func BenchmarkDiffOfSharedParts(b *testing.B) {
	old := u(b, deployment())
	shared, err := patch.Apply(types.MergePatchType, old, []byte(`{"spec":{"replicas":5}}`), patch.Options{SkipTypeCheck: true})
	if err != nil {
		b.Fatal(err)
	}
	copied := shared.DeepCopy()
	b.Run("Shared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Diff(old, shared)
		}
	})
	b.Run("Copied", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Diff(old, copied)
		}
	})
}
