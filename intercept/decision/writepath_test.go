package decision

import (
	"slices"
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
)

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
		{"allowance violation from the cache: the grant may not be cached yet",
			Decision{Category: Expected, Result: Deny, Allowances: &AllowanceOutcome{Violations: []allowance.Violation{{Mutation: "spec.replicas"}}}}, true, true},
		{"allowance violation from a live read",
			Decision{Category: Expected, Result: Deny, Allowances: &AllowanceOutcome{Violations: []allowance.Violation{{Mutation: "spec.replicas"}}}}, false, false},
		{"allowance-checked and justified from the cache", Decision{Category: Expected, Allowances: &AllowanceOutcome{Checked: true}}, true, false},
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
		{500, ApprovalCheckStoredAfterDeadline},
		{502, ApprovalCheckStoredAfterDeadline},
		{503, ApprovalCheckStoredAfterDeadline},
		{504, ApprovalCheckStoredAfterDeadline},
		{0, ApprovalCheckStoredAfterDeadline},
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

func TestNeeds(t *testing.T) {
	confirmable := Held{Confirmable: true, MainResource: true, ParentFromCache: true, HasChanges: true}
	tests := []struct {
		name string
		d    Decision
		held Held
		want Need
	}{
		{name: "expected: nothing more", d: Decision{Result: Allow, Category: Expected}, held: confirmable},
		{name: "drift on an update of an older version than the one read live: kube-apiserver's conflict, nothing sent",
			d: Decision{Result: Deny, Drift: true, ConfirmWithServer: true}, held: Held{Confirmable: true, MainResource: true, ChildLive: true, NamesOlderVersion: true, HasChanges: true},
			want: Need{Conflict: true}},
		{name: "expected on an update of an older version: acted on, kube-apiserver answers",
			d: Decision{Result: Allow, Category: Expected}, held: Held{Confirmable: true, MainResource: true, ChildLive: true, NamesOlderVersion: true}},
		{name: "deleting again what the cache shows being deleted: the object read live",
			d: Decision{Result: Allow, Category: NoDesiredChange, AlreadyDeleting: true}, held: Held{Confirmable: true, MainResource: true, Operation: Delete},
			want: Need{LiveChild: true, NoCopy: true}},
		{name: "deleting again what a live read shows being deleted: nothing more",
			d: Decision{Result: Allow, Category: NoDesiredChange, AlreadyDeleting: true}, held: Held{Confirmable: true, MainResource: true, Operation: Delete, ChildLive: true}},
		{name: "drift from the cache: the object, the server's result, the parent and who may read them together",
			d: Decision{Result: Deny, Drift: true, ConfirmWithServer: true}, held: confirmable,
			want: Need{ServerResult: true, FreshParent: true, ChildAccess: true, ParentAccess: true}},
		{name: "drift allowed with a warning: who may read the parent asked with the confirmation",
			d: Decision{Result: Allow, Drift: true, ConfirmWithServer: true, Warnings: []string{"w"}}, held: confirmable,
			want: Need{ServerResult: true, FreshParent: true, ChildAccess: true, ParentAccess: true}},
		{name: "drift confirmed with access known: nothing asked twice",
			d:    Decision{Result: Deny, Drift: true, ConfirmWithServer: true},
			held: Held{Confirmable: true, MainResource: true, ParentFromCache: true, HasChanges: true, ChildAccessKnown: true, ParentAccessKnown: true},
			want: Need{ServerResult: true, FreshParent: true}},
		{name: "no desired change confirmed: nobody's access asked, the verdict shows nothing",
			d: Decision{Result: Allow, Category: NoDesiredChange, ConfirmWithServer: true}, held: confirmable,
			want: Need{ServerResult: true}},
		{name: "drift confirmed, parent live: who may read what, for the message",
			d: Decision{Result: Deny, Drift: true}, held: Held{MainResource: true, ChildLive: true, HasChanges: true},
			want: Need{ChildAccess: true, ParentAccess: true}},
		{name: "a /scale write is confirmed too", d: Decision{Result: Allow, ConfirmWithServer: true},
			held: Held{Confirmable: true}, want: Need{ServerResult: true}},
		{name: "a status write is not", d: Decision{Result: Allow, ConfirmWithServer: true}, held: Held{}},
		{name: "controls changed on a copy that does not name the writer: a live read, not a copy",
			d: Decision{Result: Allow, RecheckController: true}, held: Held{MainResource: true}, want: Need{LiveChild: true, NoCopy: true}},
		{name: "controls of a status write: a live read too",
			d: Decision{Result: Allow, RecheckController: true}, held: Held{StatusWrite: true}, want: Need{LiveChild: true, NoCopy: true}},
		{name: "controls of a /scale write: none", d: Decision{Result: Allow, RecheckController: true}, held: Held{}},
		{name: "read live already: not again", d: Decision{Result: Allow, RecheckController: true}, held: Held{MainResource: true, ChildLive: true}},
		{name: "the server's result includes the live read", d: Decision{Result: Allow, RecheckController: true, ConfirmWithServer: true},
			held: Held{Confirmable: true, MainResource: true}, want: Need{ServerResult: true}},
		{name: "a denial without changes asks only about the parent", d: Decision{Result: Deny, Category: Frozen},
			held: Held{MainResource: true}, want: Need{ParentAccess: true}},
		{name: "a warning names the parent", d: Decision{Result: Allow, Warnings: []string{"w"}}, held: Held{}, want: Need{ParentAccess: true}},
		{name: "drift told from the child's metadata: the server's result (a live read of the child) and the parent at once",
			d:    Decision{Result: Deny, Drift: true, ConfirmWithServer: true},
			held: Held{Confirmable: true, MainResource: true, ParentFromCache: true, ChildMetadataOnly: true, Operation: Update},
			want: Need{ServerResult: true, FreshParent: true, ParentAccess: true}},
		{name: "drift with changes told from the child's metadata: who may read the child too",
			d:    Decision{Result: Deny, Drift: true, ConfirmWithServer: true},
			held: Held{Confirmable: true, MainResource: true, ParentFromCache: true, ChildMetadataOnly: true, HasChanges: true, Operation: Update},
			want: Need{ServerResult: true, FreshParent: true, ChildAccess: true, ParentAccess: true}},
		{name: "any other verdict on the child's metadata that depends on its content: the whole child first, nothing else",
			d:    Decision{Result: Deny, Category: Frozen},
			held: Held{Confirmable: true, MainResource: true, ParentFromCache: true, ChildMetadataOnly: true, HasChanges: true, Operation: Update},
			want: Need{LiveChild: true}},
		{name: "an Expected write stands on the child's metadata", d: Decision{Result: Allow, Category: Expected},
			held: Held{Confirmable: true, MainResource: true, ChildMetadataOnly: true, Operation: Update}},
		{name: "system annotations put back, the write naming another version: a live read, not a copy",
			d: Decision{Result: Allow, OnStoredVersion: true}, held: Held{MainResource: true, NamesOtherVersion: true}, want: Need{LiveChild: true, NoCopy: true}},
		{name: "system annotations put back, on the version the write names: nothing more",
			d: Decision{Result: Allow, OnStoredVersion: true}, held: Held{MainResource: true}},
		{name: "system annotations put back, read live already: not again",
			d: Decision{Result: Allow, OnStoredVersion: true}, held: Held{MainResource: true, NamesOtherVersion: true, ChildLive: true}},
		{name: "asked already", d: Decision{Result: Deny, Drift: true},
			held: Held{HasChanges: true, ChildAccessKnown: true, ParentAccessKnown: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Needs(&tt.d, tt.held); got != tt.want {
				t.Errorf("Needs = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOnForwardedConflict(t *testing.T) {
	tests := []struct {
		added bool
		round int
		want  ConflictAction
	}{
		{false, 1, RelayConflict},
		{false, MaxRounds, RelayConflict},
		{true, 1, DecideAgainOnFreshState},
		{true, MaxRounds - 1, DecideAgainOnFreshState},
		{true, MaxRounds, RefuseStillMoving},
	}
	for _, tt := range tests {
		if got := OnForwardedConflict(tt.added, tt.round); got != tt.want {
			t.Errorf("OnForwardedConflict(%v, %d) = %d, want %d", tt.added, tt.round, got, tt.want)
		}
	}
}

func TestOnCollectionAnswer(t *testing.T) {
	tests := []struct {
		code int
		want ReservedApprovalAction
	}{
		{200, ApprovalUsed},
		{409, ApprovalCheckStored},
		{422, ApprovalCheckStored},
		{500, ApprovalCheckStoredAfterDeadline},
		{0, ApprovalCheckStoredAfterDeadline},
	}
	for _, tt := range tests {
		if got := OnCollectionAnswer(tt.code); got != tt.want {
			t.Errorf("OnCollectionAnswer(%d) = %d, want %d", tt.code, got, tt.want)
		}
	}
}

func TestCollectionVerdict(t *testing.T) {
	var v CollectionVerdict
	for i := range 3 * MaxNamedChildren {
		d := Decision{Result: Allow}
		if i%2 == 1 {
			d.Result = Deny
		}
		v.Add(i, &d)
	}
	if !v.Refused || v.Denied != 3*MaxNamedChildren/2 || len(v.Blocked) != MaxNamedChildren || v.Blocked[0] != 1 || v.Blocked[1] != 3 {
		t.Errorf("verdict %+v: want refused, %d denied, the first %d named from index 1", v, 3*MaxNamedChildren/2, MaxNamedChildren)
	}
	var allowed CollectionVerdict
	allowed.Add(0, &Decision{Result: Allow})
	if allowed.Refused || allowed.Denied != 0 {
		t.Errorf("an allowed object refused the collection: %+v", allowed)
	}
}

func TestStepsFor(t *testing.T) {
	once := &ApprovalsUpdate{}
	ahead := &AnnotationChanges{Set: map[string]string{"kausal.io/allowances": "[]"}}
	tests := []struct {
		name        string
		d           Decision
		dryRun      bool
		preflighted bool
		want        []Step
	}{
		{name: "denied", d: Decision{Result: Deny}, want: []Step{StepRefuse}},
		{name: "allowed", d: Decision{Result: Allow}, want: []Step{StepPrepare, StepForward}},
		{name: "a once approval", d: Decision{Result: Allow, ConsumeOnce: true, ApprovalsUpdate: once},
			want: []Step{StepPrepare, StepPreflight, StepReserve, StepForward}},
		{name: "a once approval, preflighted in an earlier round", d: Decision{Result: Allow, ConsumeOnce: true, ApprovalsUpdate: once},
			preflighted: true, want: []Step{StepPrepare, StepReserve, StepForward}},
		{name: "a dry run consumes nothing", d: Decision{Result: Allow, ConsumeOnce: true, ApprovalsUpdate: once}, dryRun: true,
			want: []Step{StepPrepare, StepForward}},
		{name: "allowances ahead of a /scale follow a preflight", d: Decision{Result: Allow, AnnotationsAhead: ahead},
			want: []Step{StepPrepare, StepPreflight, StepWriteAhead, StepForward}},
		{name: "allowances ahead, preflighted in an earlier round", d: Decision{Result: Allow, AnnotationsAhead: ahead},
			preflighted: true, want: []Step{StepPrepare, StepWriteAhead, StepForward}},
		{name: "allowances ahead and a once approval", d: Decision{Result: Allow, AnnotationsAhead: ahead, ConsumeOnce: true, ApprovalsUpdate: once},
			want: []Step{StepPrepare, StepPreflight, StepReserve, StepWriteAhead, StepForward}},
		{name: "a dry run writes nothing ahead", d: Decision{Result: Allow, AnnotationsAhead: ahead}, dryRun: true,
			want: []Step{StepPrepare, StepForward}},
		{name: "a denial writes nothing ahead", d: Decision{Result: Deny, AnnotationsAhead: ahead}, want: []Step{StepRefuse}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := StepsFor(&tt.d, tt.dryRun, tt.preflighted); !slices.Equal(got, tt.want) {
				t.Errorf("StepsFor = %v, want %v", got, tt.want)
			}
		})
	}
}
