package allowance

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// allocatedBy is the heap f allocates.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The fields a write changes are read from whatever a caller sends, before
// any policy is looked at: their cost must follow the body's size, not its
// depth times its size, nor the length of a key times the leaves below it.
func TestChangedFieldsCostFollowTheBodysSize(t *testing.T) {
	deep := func(depth int) any {
		var v any = "x"
		for range depth {
			v = map[string]any{"a": v}
		}
		return v
	}
	longKeyOverManyLeaves := func() any {
		leaves := map[string]any{}
		for i := range 2048 {
			leaves["k"+strconv.Itoa(i)] = int64(1)
		}
		return map[string]any{strings.Repeat("k", 128<<10): leaves}
	}
	const bound = 64 << 20
	tests := []struct {
		name string
		run  func()
	}{
		{"a person creates a 5000-deep object", func() {
			obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "deep"}, "spec": deep(5000)}
			Initiate(context.Background(), nil, Change{Subject: person, Kind: "ConfigMap", Name: "deep", New: obj, Generation: 1})
		}},
		{"a 128 KiB key over 2048 leaves", func() {
			ChangedPaths(nil, map[string]any{"spec": longKeyOverManyLeaves()})
		}},
		{"a merge patch 5000 deep", func() {
			patch := `{"spec":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000) + `}`
			WrittenPaths([]byte(patch), false)
		}},
		{"a merge patch with a 128 KiB key over 2048 leaves", func() {
			var b strings.Builder
			b.WriteString(`{"spec":{"` + strings.Repeat("k", 128<<10) + `":{`)
			for i := range 2048 {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`"k` + strconv.Itoa(i) + `":1`)
			}
			b.WriteString(`}}}`)
			WrittenPaths([]byte(b.String()), false)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := allocatedBy(tt.run); got > bound {
				t.Errorf("allocated %d MiB, want at most %d MiB", got>>20, bound>>20)
			}
		})
	}
}

// Below a depth or a length of keys no policy path can reach, what
// changed is named once, by the path that reaches there, not by each of
// the fields below.
func TestChangedFieldsBeyondAnyPolicyPathAreNamedWhereTheyStart(t *testing.T) {
	long := strings.Repeat("k", maxPathLength)
	old := map[string]any{"spec": map[string]any{long: map[string]any{"a": int64(1), "b": int64(1)}, "replicas": int64(1)}}
	new := map[string]any{"spec": map[string]any{long: map[string]any{"a": int64(2), "b": int64(1)}, "replicas": int64(2)}}
	got := ChangedPaths(old, new)
	if want := []string{"spec." + long, "spec.replicas"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("changed %.80q, want %.80q", got, want)
	}
	if got := ChangedPaths(old, old); len(got) != 0 {
		t.Fatalf("an unchanged object beyond the bound changed %.80q", got)
	}
	// Longer than any policy path, it is covered by none: a write that
	// changes it is held, as one whose full paths were listed was.
	if Covers("spec", got[0]) {
		t.Errorf("a policy path covers %.80q", got[0])
	}
}

// A key with brackets is written so that it reads back as one key: as it
// was, spec["replicas].[x"] read back as spec.replicas.x, which an
// allowance of spec.replicas covers.
func TestAKeyWithBracketsIsNoOtherPath(t *testing.T) {
	policies := []*Compiled{compileYAML(t, policyYAML("scale", `  match:
    kind: Widget
    fields: ["spec.replicas"]
  subjects:
  - {kind: Group, name: people, mayInitiate: true}
  - {kind: ServiceAccount, namespace: sys, name: widget-controller}
  allow:
  - {kind: Gadget, mutations: ["spec.replicas"]}
`))}
	ctrl := Subject{User: "system:serviceaccount:sys:widget-controller"}
	parent := Parent{Kind: "Widget", Name: "w", Allowances: []Allowance{{Kind: "Gadget", Mutation: "spec.replicas", Generation: 2,
		Initiator: alice, Policy: "scale", Trace: []Hop{hop("Widget", "w", 2, "spec.replicas")}}}}
	old := map[string]any{"spec": map[string]any{"replicas": int64(1)}}
	added := map[string]any{"spec": map[string]any{"replicas": int64(1), "replicas].[x": "anything"}}
	if v := Use(policies, parent, Change{Subject: ctrl, Kind: "Gadget", Name: "g", Old: old, New: added, Generation: 3}); v.Allowed() {
		t.Errorf("adding spec[%q] is allowed by an allowance of spec.replicas: mutations %v", "replicas].[x", v.Mutations)
	}
	paths, _, ok := WrittenPaths([]byte(`{"spec":{"replicas].[x":"anything"}}`), false)
	if !ok {
		t.Fatal("the patch was not read")
	}
	if v := Use(policies, parent, Change{Subject: ctrl, Kind: "Gadget", Name: "g", Old: map[string]any{}, New: map[string]any{}, Generation: 3, Written: paths}); v.Allowed() {
		t.Errorf("a merge patch of spec[%q] (written paths %v) is allowed by an allowance of spec.replicas", "replicas].[x", paths)
	}
}

// cel-go's cost tracker takes time quadratic in a comprehension's length
// while it charges a linear cost: lists.range(50000).all(...) is charged
// within the limit and takes seconds. Such a policy is refused, not
// reported Ready to run on every write.
func TestAPolicyWithALongRangeIsRefused(t *testing.T) {
	p := compileYAML(t, policyYAML("slow", `  match:
    kind: Deployment
    fields: ["spec.replicas"]
    cel: ["lists.range(50000).all(i, i >= 0)"]
  subjects:
  - {kind: Group, name: people, mayInitiate: true}
  allow:
  - {kind: ReplicaSet, mutations: ["spec.replicas"]}
`))
	if p.Valid() {
		t.Fatal("a policy whose condition ranges over 50000 integers is valid")
	}
}
