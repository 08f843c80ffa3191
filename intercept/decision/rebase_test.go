package decision

import (
	"reflect"
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

func TestRebase(t *testing.T) {
	const (
		stale    = `{"apiVersion":"v1","kind":"ConfigMap","name":"cfg","generation":4,"mode":"once"}`
		kept     = `{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}`
		personal = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-2","generation":5,"mode":"once"}`
	)
	prune := SideWrite{
		AnnotationChanges: AnnotationChanges{Set: map[string]string{annotations.Approvals: "[" + kept + "]"}},
		Seen:              map[string]string{annotations.Approvals: "[" + stale + "," + kept + "]"},
	}
	record := SideWrite{
		AnnotationChanges: AnnotationChanges{Set: map[string]string{annotations.Controllers: "ctrl1,aaaaa", annotations.Phase: "initialized"}},
		Seen:              map[string]string{annotations.Controllers: "aaaaa"},
	}
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
		{"the last entry pruned: the annotation goes", SideWrite{
			AnnotationChanges: AnnotationChanges{Remove: []string{annotations.Approvals}},
			Seen:              map[string]string{annotations.Approvals: "[" + stale + "]"}},
			map[string]string{annotations.Approvals: "[" + stale + "]"},
			AnnotationChanges{Remove: []string{annotations.Approvals}}},
		{"another controller was recorded meanwhile: both stay, the writer first", record,
			map[string]string{annotations.Controllers: "bbbbb,aaaaa"},
			AnnotationChanges{Set: map[string]string{annotations.Controllers: "ctrl1,bbbbb,aaaaa", annotations.Phase: "initialized"}}},
		{"already recorded and persisted: nothing to write", record,
			map[string]string{annotations.Controllers: "ctrl1,aaaaa", annotations.Phase: "initialized"},
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
