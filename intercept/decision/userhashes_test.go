package decision

import (
	"reflect"
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// The user's hashes handed in are the ones Decide would compute: the
// decision is the same with them, and they are what it uses.
func TestDecideWithTheUsersHashes(t *testing.T) {
	for name, f := range map[string]func(in *Input){
		"expected":         func(in *Input) { obsGen(4)(in.Parent) },
		"drift":            func(*Input) {},
		"another's write":  alice,
		"no parent":        func(in *Input) { in.Parent = nil },
		"controller reset": func(in *Input) { setAnn("kausality.io/controllers", "x")(in.OldObject) },
	} {
		t.Run(name, func(t *testing.T) {
			in := base()
			f(&in)
			want := Decide(in)
			hashes := controllerid.UserOf(controllerid.UserIdentifier(in.User.GetName(), in.User.GetUID()))
			in.UserHashes = &hashes
			if got := Decide(in); !reflect.DeepEqual(got, want) {
				t.Errorf("with the hashes handed in:\n%+v\nwant\n%+v", got, want)
			}
			other := controllerid.UserOf("someone else")
			in.UserHashes = &other
			if got := Decide(in); got.Actor.UserHash != other.Short {
				t.Errorf("the actor's hash is %q, not the one handed in (%q)", got.Actor.UserHash, other.Short)
			}
		})
	}
}
