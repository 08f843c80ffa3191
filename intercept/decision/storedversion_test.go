package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// A write that changes a system annotation, which the decision puts back
// to its stored value, must land on the version that value was read from.
func TestOnStoredVersion(t *testing.T) {
	person := func(in *Input) { in.User = &user.DefaultInfo{Name: "alice"}; in.FieldManager = "kubectl-edit" }
	reconciling := func(in *Input) { in.Parent = mkParent(func(u *unstructured.Unstructured) { u.SetGeneration(6) }) }
	touchesUpdaters := func(in *Input) {
		in.OldObject = mkChild(1, setAnn(annotations.Updaters, "aaaaa"))
		in.NewObject = mkChild(3, setAnn(annotations.Updaters, "zzzzz"))
	}
	dropsControllers := func(in *Input) {
		in.OldObject = mkChild(1, setAnn(annotations.Controllers, "0123456789abcdef"))
		in.NewObject = mkChild(1, delAnn(annotations.Controllers))
		in.DesiredChanged, in.Changes = false, nil
	}
	namedUpdater := func(in *Input) {
		alice := Decide(*in).Actor.UserHash
		in.OldObject = mkChild(1, setAnn(annotations.Updaters, alice))
		in.NewObject = mkChild(3, setAnn(annotations.Updaters, alice))
	}
	cases := []struct {
		name string
		with []func(*Input)
		want bool
	}{
		{"a person's write that rewrites the updaters record", []func(*Input){person, touchesUpdaters}, true},
		{"the parent's controller carrying out its spec, rewriting the updaters record", []func(*Input){reconciling, touchesUpdaters}, true},
		{"a metadata-only write that drops a controller record", []func(*Input){person, dropsControllers}, true},
		{"a new writer's write of the spec: its hash added to the updaters record", []func(*Input){person}, true},
		{"a write of the spec alone by a writer the updaters record names", []func(*Input){person, namedUpdater}, false},
		{"a status write that rewrites the updaters record", []func(*Input){person, touchesUpdaters, func(in *Input) { in.StatusWrite = true }}, true},
		{"a status write that leaves them", []func(*Input){person, func(in *Input) { in.StatusWrite = true }}, false},
		{"a denied write", []func(*Input){touchesUpdaters}, false},
		{"a create", []func(*Input){person, touchesUpdaters, func(in *Input) { in.Operation, in.OldObject = Create, nil }}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			for _, w := range tc.with {
				w(&in)
			}
			d := Decide(in)
			if d.OnStoredVersion != tc.want {
				t.Errorf("OnStoredVersion %v, want %v (%s/%s: %s)", d.OnStoredVersion, tc.want, d.Result, d.Category, d.Reason)
			}
		})
	}
}
