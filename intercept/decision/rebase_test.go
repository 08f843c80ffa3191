package decision

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

func TestRebase(t *testing.T) {
	const (
		stale    = `{"apiVersion":"v1","kind":"ConfigMap","name":"cfg","generation":4,"mode":"once"}`
		kept     = `{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}`
		personal = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-2","generation":5,"mode":"once"}`
		// Entries the proxy cannot read, or reads but would not write so.
		odd   = `{"apiVersion":"apps/v1","kind":"ReplicaSet","generation":5,"mode":"whenever"}`
		noted = `{ "apiVersion": "v1", "kind": "Secret", "name": "t", "mode": "always", "note": "INC-7" }`
	)
	prune := SideWrite{
		AnnotationChanges: AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + kept + "]"}},
		Seen:              map[string]string{annotations.Approvals: "[" + stale + "," + kept + "]"},
	}
	pruneAroundOdd := SideWrite{
		AnnotationChanges: AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + odd + "," + kept + "]"}},
		Seen:              map[string]string{annotations.Approvals: "[" + odd + "," + stale + "," + kept + "]"},
	}
	ctrl1, a, b := controllerid.UserOf("ctrl1"), controllerid.LongHash("a"), controllerid.LongHash("b")
	record := SideWrite{
		AnnotationChanges: AnnotationChanges{Set: map[string]string{annotations.Controllers: ctrl1.Long + "," + a, annotations.Phase: "initialized"}},
		Seen:              map[string]string{annotations.Controllers: a},
		Controller:        &ControllerRecord{User: ctrl1, ObservedGeneration: 5},
	}
	observed := SideWrite{
		AnnotationChanges: AnnotationChanges{Set: map[string]string{annotations.ObservedGeneration: "6"}},
		Seen:              map[string]string{annotations.ObservedGeneration: "5"},
	}
	full := strings.Join([]string{a, b, controllerid.LongHash("c"), controllerid.LongHash("d"), controllerid.LongHash("e")}, ",")
	tests := []struct {
		name  string
		sw    SideWrite
		fresh map[string]string
		want  AnnotationChanges
	}{
		{"nothing changed since the decision: as decided", prune,
			map[string]string{annotations.Approvals: "[" + stale + "," + kept + "]"},
			AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + kept + "]"}}},
		{"a person added an approval meanwhile: it is kept", prune,
			map[string]string{annotations.Approvals: "[" + stale + "," + kept + "," + personal + "]"},
			AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + kept + "," + personal + "]"}}},
		{"somebody pruned it already: nothing to write", prune,
			map[string]string{annotations.Approvals: "[" + kept + "]"},
			AnnotationChanges{}},
		{"a person's edit left the approvals unparsable: left alone", prune,
			map[string]string{annotations.Approvals: "[" + stale + ",{broken"},
			AnnotationChanges{}},
		{"a person added an entry the proxy cannot read: kept as written, in place", prune,
			map[string]string{annotations.Approvals: "[" + odd + "," + stale + "," + kept + "," + noted + "]"},
			AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + odd + "," + kept + "," + noted + "]"}}},
		{"an unreadable entry seen by the decision survives its rewrite", pruneAroundOdd,
			map[string]string{annotations.Approvals: "[" + odd + "," + stale + "," + kept + "]"},
			AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + odd + "," + kept + "]"}}},
		{"... and a person's entry added meanwhile too", pruneAroundOdd,
			map[string]string{annotations.Approvals: "[" + odd + "," + stale + "," + kept + "," + personal + "]"},
			AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + odd + "," + kept + "," + personal + "]"}}},
		{"only unreadable entries left: the annotation stays", SideWrite{
			AnnotationChanges: AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + odd + "]"}},
			Seen:              map[string]string{annotations.Approvals: "[" + stale + "," + odd + "]"}},
			map[string]string{annotations.Approvals: "[" + stale + "," + odd + "]"},
			AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + odd + "]"}}},
		{"the last entry pruned: the annotation goes", SideWrite{
			AnnotationChanges: AnnotationChanges{Remove: []string{annotations.Approvals}},
			Seen:              map[string]string{annotations.Approvals: "[" + stale + "]"}},
			map[string]string{annotations.Approvals: "[" + stale + "]"},
			AnnotationChanges{Remove: []string{annotations.Approvals}}},
		{"another controller was recorded meanwhile: both stay, the writer first", record,
			map[string]string{annotations.Controllers: b + "," + a},
			AnnotationChanges{Set: map[string]string{annotations.Controllers: ctrl1.Long + "," + b + "," + a, annotations.Phase: "initialized"}}},
		{"the record filled up meanwhile: the writer is not recorded, nobody is pushed out", record,
			map[string]string{annotations.Controllers: full},
			AnnotationChanges{Set: map[string]string{annotations.Phase: "initialized"}}},
		{"observed generation: nothing recorded since, as decided", observed,
			map[string]string{annotations.ObservedGeneration: "5"},
			AnnotationChanges{Set: map[string]string{annotations.ObservedGeneration: "6"}}},
		{"observed generation: a later one was recorded meanwhile, never lowered", observed,
			map[string]string{annotations.ObservedGeneration: "7"},
			AnnotationChanges{}},
		{"observed generation: the same one was recorded meanwhile", observed,
			map[string]string{annotations.ObservedGeneration: "6"},
			AnnotationChanges{}},
		{"observed generation: an earlier one was recorded meanwhile, moved forward", observed,
			map[string]string{annotations.ObservedGeneration: "4"},
			AnnotationChanges{Set: map[string]string{annotations.ObservedGeneration: "6"}}},
		{"observed generation: a record nobody can read is replaced", observed,
			map[string]string{annotations.ObservedGeneration: "six"},
			AnnotationChanges{Set: map[string]string{annotations.ObservedGeneration: "6"}}},
		{"observed generation: the record was removed meanwhile, written again", observed,
			map[string]string{},
			AnnotationChanges{Set: map[string]string{annotations.ObservedGeneration: "6"}}},
		{"already recorded and persisted: nothing to write", record,
			map[string]string{annotations.Controllers: ctrl1.Long + "," + a, annotations.Phase: "initialized"},
			AnnotationChanges{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.sw.Rebase(tt.fresh)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRebaseOn(t *testing.T) {
	ctrl := controllerid.UserOf("ctrl")
	record := SideWrite{
		AnnotationChanges: AnnotationChanges{Set: map[string]string{annotations.Controllers: ctrl.Long, annotations.Phase: "initialized"}},
		Seen:              map[string]string{},
		Controller:        &ControllerRecord{User: ctrl, ObservedGeneration: 5},
	}
	stored := func(generation int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGeneration(generation)
		return u
	}
	tests := []struct {
		name       string
		generation int64
		want       AnnotationChanges
	}{
		{"observedGeneration at the stored generation: recorded", 5,
			AnnotationChanges{Set: map[string]string{annotations.Controllers: ctrl.Long, annotations.Phase: "initialized"}}},
		{"the generation moved on since: recorded", 6,
			AnnotationChanges{Set: map[string]string{annotations.Controllers: ctrl.Long, annotations.Phase: "initialized"}}},
		{"observedGeneration beyond the stored generation: a made-up observation records nobody", 4,
			AnnotationChanges{Set: map[string]string{annotations.Phase: "initialized"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := record.RebaseOn(stored(tt.generation)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A once approval reserved for a write kube-apiserver refused goes back as
// it was written, next to whatever the parent holds by then.
func TestApprovalsUpdateRestore(t *testing.T) {
	const (
		written = `{ "kind": "ReplicaSet", "apiVersion": "apps/v1", "name": "web-1", "generation": 5, "note": "INC-7" }`
		odd     = `{"apiVersion":"apps/v1","kind":"ReplicaSet","mode":"whenever"}`
		other   = `{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}`
	)
	consumed := annotations.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5}
	upd := ApprovalsUpdate{Consumed: consumed, ConsumedRaw: []byte(written)}
	tests := []struct {
		name    string
		upd     ApprovalsUpdate
		current string
		want    string
		changed bool
		err     bool
	}{
		{"the annotation went with it: back as written", upd, "", "[" + written + "]", true, false},
		{"others stay as written, unreadable ones included", upd, "[" + odd + "," + other + "]", "[" + odd + "," + other + "," + written + "]", true, false},
		{"already back: nothing to write", upd, "[" + other + "," + written + "]", "[" + other + "," + written + "]", false, false},
		{"the same approval written otherwise counts as back", upd,
			`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`, false, false},
		{"without its raw form it is encoded", ApprovalsUpdate{Consumed: consumed}, "[" + odd + "]",
			"[" + odd + `,{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`, true, false},
		{"a value that is not a JSON array is never rewritten", upd, "[" + other + ",{", "[" + other + ",{", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := tt.upd.Restore(tt.current)
			if got != tt.want || changed != tt.changed || (err != nil) != tt.err {
				t.Errorf("got %s %v %v, want %s %v err=%v", got, changed, err, tt.want, tt.changed, tt.err)
			}
		})
	}
}
