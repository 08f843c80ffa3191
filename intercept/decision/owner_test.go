package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

func withoutOwner(u *unstructured.Unstructured) { u.SetOwnerReferences(nil) }

// moveInput: the write removes the child's controller ownerReference and
// changes nothing else; it is decided under the parent it leaves.
func moveInput(ms ...func(in *Input)) Input {
	in := base()
	in.OldObject = mkChild(1)
	in.NewObject = mkChild(1, withoutOwner)
	in.DesiredChanged, in.Changes = false, nil
	in.Settle = &settle.Facts{AtCurrentSpec: true, Known: true, SpecSince: 5, Reason: "settled"}
	for _, m := range ms {
		m(&in)
	}
	return in
}

func TestMovingTheControllerReferenceIsDecidedUnderTheFormerParent(t *testing.T) {
	tests := []struct {
		name     string
		in       Input
		result   Result
		category Category
		consume  bool
	}{
		{"a frozen parent holds the move", moveInput(func(in *Input) { setAnn(annotations.Freeze, "true")(in.Parent) }), Deny, Frozen, false},
		{"the controller leaving a settled parent is drift", moveInput(), Deny, DriftUnapproved, false},
		{"a person moving the child is a new origin", moveInput(alice), Allow, NewOrigin, false},
		{"a once approval the move uses is consumed", moveInput(func(in *Input) {
			setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`)(in.Parent)
		}), Allow, DriftApproved, true},
		{"a metadata-only write that keeps the owner is no desired change", func() Input {
			in := moveInput()
			in.NewObject = mkChild(1, setAnn("team", "a"))
			return in
		}(), Allow, NoDesiredChange, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			if d.Result != tc.result || d.Category != tc.category || d.ConsumeOnce != tc.consume {
				t.Fatalf("got %s/%s consume=%v (%s), want %s/%s consume=%v", d.Result, d.Category, d.ConsumeOnce, d.Reason, tc.result, tc.category, tc.consume)
			}
		})
	}
}

func TestUnderBothConsumesTheFormerParentsOnceApproval(t *testing.T) {
	once := approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: approval.Once}
	update := &ApprovalsUpdate{Target: parentRef, Consumed: once}
	primary := Decision{Result: Allow, Category: NoParent, Child: rsRef}
	former := Decision{Result: Allow, Category: DriftApproved, Drift: true, ConsumeOnce: true, ApprovalsUpdate: update, Approval: &once, Report: ReportResolved}

	got := UnderBoth(primary, former)
	if got.Result != Allow || !got.ConsumeOnce || got.ApprovalsUpdate != update || got.Report != ReportResolved || got.Category != NoParent || got.Drift {
		t.Fatalf("the former parent's once approval is not consumed: %+v", got)
	}

	both := primary
	both.ConsumeOnce, both.ApprovalsUpdate = true, &ApprovalsUpdate{Target: ObjectRef{Kind: "Deployment", Name: "other"}}
	got = UnderBoth(both, former)
	if got.Result != Deny || got.ConsumeOnce || got.ApprovalsUpdate != nil || got.Message == "" {
		t.Fatalf("a write using once approvals of two parents: %+v, want a denial that says what to do", got)
	}
}

// In log mode the controller leaving a settled parent is allowed, and is
// still drift under that parent: recorded and reported there, whatever the
// parent it ends up with (here none) makes of the write.
func TestUnderBothKeepsTheDriftOfLeavingASettledParentInLogMode(t *testing.T) {
	logMode := func(in *Input) { in.Mode.Default = annotations.ModeLog }
	former := Decide(moveInput(logMode))
	if former.Result != Allow || former.Category != DriftUnapproved || !former.Drift || former.Report != ReportDetected {
		t.Fatalf("under the former parent: %s/%s drift=%v report=%v, want a log-mode drift", former.Result, former.Category, former.Drift, former.Report)
	}
	orphaned := moveInput(logMode)
	orphaned.Parent, orphaned.Settle = nil, nil
	primary := Decide(orphaned)
	if primary.Drift {
		t.Fatalf("without a parent the write is no drift: %+v", primary)
	}

	got := UnderBoth(primary, former)
	if got.Result != Allow || !got.Drift || got.Category != DriftUnapproved || got.Report != ReportDetected || got.Mode != annotations.ModeLog {
		t.Fatalf("got %s/%s drift=%v report=%v mode=%s (%s), want an allowed log-mode drift that is reported", got.Result, got.Category, got.Drift, got.Report, got.Mode, got.Reason)
	}
	if got.Parent == nil || got.Parent.Ref != former.Parent.Ref {
		t.Fatalf("the drift names parent %v, want the one it leaves, %v", got.Parent, former.Parent.Ref)
	}
}
