package decision

import "testing"

func TestOnFailure(t *testing.T) {
	tests := []struct {
		policy FailurePolicy
		kind   FailureKind
		want   FailureAction
	}{
		{FailurePolicyFail, Unreachable, FailureAction{Code: 503}},
		{FailurePolicyFail, Unreadable, FailureAction{Code: 500}},
		{FailurePolicyIgnore, Unreachable, FailureAction{Forward: true}},
		{FailurePolicyIgnore, Unreadable, FailureAction{Forward: true}},
	}
	for _, tt := range tests {
		if got := OnFailure(tt.policy, tt.kind); got != tt.want {
			t.Errorf("OnFailure(%s, %d) = %+v, want %+v", tt.policy, tt.kind, got, tt.want)
		}
	}
}

func TestNeedsConfirmation(t *testing.T) {
	tests := []struct {
		name      string
		d         Decision
		fromCache bool
		want      bool
	}{
		{"drift from the cache", Decision{Drift: true, Category: DriftUnapproved}, true, true},
		{"approved drift from the cache: the approval may be gone", Decision{Drift: true, Category: DriftApproved}, true, true},
		{"drift from a live read", Decision{Drift: true}, false, false},
		{"expected from the cache", Decision{Category: Expected}, true, false},
		{"new origin from the cache", Decision{Category: NewOrigin}, true, false},
	}
	for _, tt := range tests {
		if got := NeedsConfirmation(&tt.d, tt.fromCache); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestOnReservationError(t *testing.T) {
	tests := []struct {
		name    string
		e       ReservationError
		attempt int
		want    ReservationAction
	}{
		{"a conflict: decide again from a fresh parent", ReservationConflict, 1, DecideAgain},
		{"conflicts until the last attempt: the client retries", ReservationConflict, 3, RefuseRetryable},
		{"the parent was deleted meanwhile: decide again (cleanup)", ReservationParentGone, 1, DecideAgain},
		{"forbidden or unreachable: no conflict, the failure policy applies", ReservationFailed, 1, RefuseAsFailure},
	}
	for _, tt := range tests {
		if got := OnReservationError(tt.e, tt.attempt, 3); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestUnderBoth(t *testing.T) {
	allowed := Decision{Result: Allow, Category: NoParent, Warnings: []string{"a"}}
	frozen := Decision{Result: Deny, Category: Frozen}
	loggedDrift := Decision{Result: Allow, Category: DriftUnapproved, Warnings: []string{"drift"}}
	if got := UnderBoth(allowed, frozen); got.Category != Frozen {
		t.Errorf("a refusal under the former parent must win: %+v", got)
	}
	if got := UnderBoth(frozen, allowed); got.Category != Frozen {
		t.Errorf("a refusal under the new parent must stand: %+v", got)
	}
	if got := UnderBoth(allowed, loggedDrift); got.Category != NoParent || len(got.Warnings) != 2 {
		t.Errorf("allowed under both keeps the primary decision and both warnings: %+v", got)
	}
}
