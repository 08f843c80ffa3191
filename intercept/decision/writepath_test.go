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

func TestOnWriteAnswer(t *testing.T) {
	tests := []struct {
		code int
		want ReservedApprovalAction
	}{
		{200, ApprovalUsed},
		{201, ApprovalUsed},
		{409, ApprovalRestore},
		{422, ApprovalRestore},
		{403, ApprovalRestore},
		{429, ApprovalRestore},
		{500, ApprovalCheckStored},
		{502, ApprovalCheckStored},
		{503, ApprovalCheckStored},
		{504, ApprovalCheckStored},
		{0, ApprovalCheckStored},
	}
	for _, tt := range tests {
		if got := OnWriteAnswer(tt.code); got != tt.want {
			t.Errorf("OnWriteAnswer(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}
}

func TestWriteNotApplied(t *testing.T) {
	stored := func(uid, rv string) StoredState { return StoredState{Exists: true, UID: uid, ResourceVersion: rv} }
	absent := StoredState{}
	tests := []struct {
		name          string
		op            Operation
		before, after StoredState
		want          bool
	}{
		{"update: the object is as it was read", Update, stored("u1", "10"), stored("u1", "10"), true},
		{"update: a new resourceVersion may be the write", Update, stored("u1", "10"), stored("u1", "11"), false},
		{"update: the object was replaced under its name", Update, stored("u1", "10"), stored("u2", "10"), false},
		{"update: the object is gone", Update, stored("u1", "10"), absent, false},
		{"update: nothing known of the object before", Update, StoredState{Exists: true, UID: "u1"}, StoredState{Exists: true, UID: "u1"}, false},
		{"delete: the object is still there as it was read", Delete, stored("u1", "10"), stored("u1", "10"), true},
		{"delete: the object is gone", Delete, stored("u1", "10"), absent, false},
		{"delete: deletion started (a finalizer holds it)", Delete, stored("u1", "10"), stored("u1", "12"), false},
		{"create: still absent", Create, absent, absent, true},
		{"create: the object exists now", Create, absent, stored("u1", "10"), false},
		{"unknown operation", Operation("CONNECT"), stored("u1", "10"), stored("u1", "10"), false},
	}
	for _, tt := range tests {
		if got := WriteNotApplied(tt.op, tt.before, tt.after); got != tt.want {
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
