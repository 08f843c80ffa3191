package desired

import (
	"testing"
)

// The diff skips a map or list the old and the new object share (a merge
// patch's result shares what the patch left alone with the stored object;
// see patch's TestDiffOfAMergePatchResult): one map or list is no change,
// and a different one with the same content is not either.
func TestDiffOfSharedParts(t *testing.T) {
	old := u(t, deployment())
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
