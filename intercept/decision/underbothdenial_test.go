package decision

import (
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// A write the parent it joins refuses (frozen) is not a log-mode drift
// that was let through: the carry-over relabels the denial as the former
// parent's DriftUnapproved in mode log, and the denial's DriftReport
// (intercept reports after every denial) records log-mode drift under the
// parent it leaves for a write that never happened.
func TestADenialUnderTheParentItJoinsIsNotRelabelledAsLogModeDrift(t *testing.T) {
	primary := Decide(moveInput(func(in *Input) { setAnn(annotations.Freeze, "true")(in.Parent) }))
	if primary.Result != Deny || primary.Category != Frozen {
		t.Fatalf("primary %s/%s, want Frozen", primary.Result, primary.Category)
	}
	former := Decide(moveInput(func(in *Input) { in.Mode.Default = annotations.ModeLog }))
	got := UnderBoth(primary, former)
	if got.Result != Deny || got.Category != Frozen || got.Report != primary.Report || got.Mode != primary.Mode {
		t.Fatalf("got %s/%s mode=%s report=%q, want the Frozen denial as it was (mode=%s report=%q)",
			got.Result, got.Category, got.Mode, got.Report, primary.Mode, primary.Report)
	}
}
