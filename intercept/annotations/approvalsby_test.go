package annotations

import (
	"encoding/json"
	"testing"
)

func TestEntryDigestIgnoresLayout(t *testing.T) {
	a := EntryDigest(json.RawMessage(`{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}`))
	b := EntryDigest(json.RawMessage(`{ "mode": "always", "name": "web-1", "kind": "ReplicaSet", "apiVersion": "apps/v1" }`))
	c := EntryDigest(json.RawMessage(`{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-2","mode":"always"}`))
	if a != b {
		t.Errorf("the same entry laid out otherwise has another digest: %s, %s", a, b)
	}
	if a == c {
		t.Errorf("two entries share digest %s", a)
	}
	if len(a) != 16 {
		t.Errorf("digest %q is %d characters, want 16", a, len(a))
	}
}

func TestAttribute(t *testing.T) {
	const (
		e1 = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}`
		e2 = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-2","generation":3}`
	)
	d1, d2 := EntryDigest(json.RawMessage(e1)), EntryDigest(json.RawMessage(e2))
	tests := []struct {
		name             string
		record, old, new string
		user             string
		want             string
	}{
		{name: "a first approval is its writer's", new: "[" + e1 + "]", user: "alice", want: "alice:" + d1},
		{name: "an entry kept keeps its writer", record: "ctrl:" + d1, old: "[" + e1 + "]", new: "[" + e1 + "," + e2 + "]", user: "alice",
			want: sortedGroups("alice:"+d2, "ctrl:"+d1)},
		{name: "an entry laid out anew is the same entry", record: "ctrl:" + d1, old: "[" + e1 + "]",
			new: `[{ "mode":"always","name":"web-1","kind":"ReplicaSet","apiVersion":"apps/v1" }]`, user: "alice", want: "ctrl:" + d1},
		{name: "an entry given again joins its writers", record: "ctrl:" + d1, old: "[" + e1 + "]", new: "[" + e1 + "," + e1 + "]", user: "alice",
			want: sortedGroups("alice:"+d1, "ctrl:"+d1)},
		{name: "an entry added around the proxy has no writer", old: "[" + e1 + "]", new: "[" + e1 + "," + e2 + "]", user: "alice", want: "alice:" + d2},
		{name: "an entry removed leaves the record", record: sortedGroups("ctrl:"+d1, "alice:"+d2), old: "[" + e1 + "," + e2 + "]", new: "[" + e2 + "]", user: "bob",
			want: "alice:" + d2},
		{name: "no approvals, no record", record: "ctrl:" + d1, old: "[" + e1 + "]", new: "", user: "bob"},
		{name: "a value that is not an array has no entries", record: "ctrl:" + d1, old: "[" + e1 + "]", new: "{", user: "bob"},
		{name: "an entry the proxy cannot read is not recorded", new: `[{"kind":"broken"},` + e1 + "]", user: "bob", want: "bob:" + d1},
		{name: "a broken value fixed is its fixer's", old: "{", new: "[" + e1 + "]", user: "bob", want: "bob:" + d1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Attribute(tc.record, tc.old, tc.new, tc.user); got != tc.want {
				t.Errorf("Attribute = %q, want %q", got, tc.want)
			}
		})
	}
}

func sortedGroups(groups ...string) string {
	w := Writers{}
	for _, g := range groups {
		for d, us := range ParseWriters(g) {
			w[d] = append(w[d], us...)
		}
	}
	return w.String()
}

func TestWritersOnlyBy(t *testing.T) {
	e := json.RawMessage(`{"apiVersion":"*","kind":"*","name":"*","mode":"always"}`)
	d := EntryDigest(e)
	held := func(u string) bool { return u == "ctrl" || u == "ctrl2" }
	tests := []struct {
		record string
		want   bool
	}{
		{"", false},
		{"ctrl:" + d, true},
		{"ctrl:" + d + ",ctrl2:" + d, true},
		{"alice:" + d + ",ctrl:" + d, false},
		{"ctrl:0000000000000000", false},
		{"garbage", false},
	}
	for _, tc := range tests {
		if got := ParseWriters(tc.record).OnlyBy(e, held); got != tc.want {
			t.Errorf("OnlyBy under %q = %v, want %v", tc.record, got, tc.want)
		}
	}
}

func TestWritersRoundTrip(t *testing.T) {
	const v = "alice:aaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbb,ctrl:aaaaaaaaaaaaaaaa"
	if got := ParseWriters(v).String(); got != v {
		t.Errorf("ParseWriters(%q).String() = %q", v, got)
	}
}
