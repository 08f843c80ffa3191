package decision

import (
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// The parent the child joins refuses the write for an allowance violation
// (allowance-mode enforce); leaving the former parent would use a once
// approval of it. DecideAllowances now runs on the primary decision before
// UnderBoth, so the once-approval branch of UnderBoth is applied to the
// denial: it gets the former parent's once approval to consume, its
// DriftReport phase replaced by the former's, and a reason that says the
// approval is used. Before the reordering, violated() came last and reset
// all three.
func TestAnAllowanceDenialUnderTheParentItJoinsKeepsItsReportWhenTheFormerUsesOnce(t *testing.T) {
	primary := violated(Decide(moveInput()), allowance.ModeEnforce, []allowance.Violation{{Message: "needs an allowance", Mutation: "spec.replicas"}})
	if primary.Result != Deny || primary.Report != ReportDetected {
		t.Fatalf("primary %s report=%q, want a denial reported as Detected", primary.Result, primary.Report)
	}
	former := Decide(moveInput(func(in *Input) {
		setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`)(in.Parent)
	}))
	if !former.ConsumeOnce {
		t.Fatalf("former does not use its once approval: %+v", former)
	}
	got := UnderBoth(primary, former)
	if got.Result != Deny || got.Report != ReportDetected || got.ConsumeOnce || got.ApprovalsUpdate != nil || got.Reason != primary.Reason {
		t.Fatalf("got %s report=%q consumeOnce=%v approvalsUpdate=%v reason=%q; want the allowance denial as it was (report %q, reason %q)",
			got.Result, got.Report, got.ConsumeOnce, got.ApprovalsUpdate != nil, got.Reason, primary.Report, primary.Reason)
	}
}
