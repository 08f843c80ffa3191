package intercept

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// A drift record keeps the spec hash of the parent the drift is under, and
// is resolved when that hash changes: a write that moves a child away from
// a settled parent is drift there, not under the parent it joins.
func TestReportedParentIsTheOneTheDriftIsUnder(t *testing.T) {
	deployment := func(name, uid string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apps/v1")
		u.SetKind("Deployment")
		u.SetNamespace("apps")
		u.SetName(name)
		u.SetUID(types.UID(uid))
		return u
	}
	joined, left := deployment("joined", "joined-uid"), deployment("left", "left-uid")
	leftAgain := deployment("left", "recreated-uid")
	info := func(p *unstructured.Unstructured) *decision.ParentInfo {
		return &decision.ParentInfo{Ref: decision.RefOf(p), UID: string(p.GetUID())}
	}
	tests := []struct {
		name          string
		parent, moved *unstructured.Unstructured
		decided       *decision.ParentInfo
		want          *unstructured.Unstructured
	}{
		{"a write that keeps its parent", joined, nil, info(joined), joined},
		{"drift under the parent it leaves", joined, left, info(left), left},
		{"drift under the parent it joins", joined, left, info(joined), joined},
		{"leaving the only parent it had", nil, left, info(left), left},
		{"a parent of the same name, created again", joined, leftAgain, info(left), joined},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &facts{}
			f.parent.obj, f.formerParent.obj = tt.parent, tt.moved
			if got := reportedParent(f, &decision.Decision{Parent: tt.decided}); got != tt.want {
				t.Fatalf("reported under %v, want %v", got, tt.want)
			}
		})
	}
}
