package decision

import "testing"

func TestStandsOnMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Decision
		op   Operation
		want bool
	}{
		{"expected controller write", Decision{Result: Allow, Category: Expected}, Update, true},
		{"no parent", Decision{Result: Allow, Category: NoParent}, Update, true},
		{"parent deleting", Decision{Result: Allow, Category: ParentDeleting}, Update, true},
		{"allowed delete of any category", Decision{Result: Allow, Category: NewOrigin}, Delete, true},
		{"new origin depends on what changed", Decision{Result: Allow, Category: NewOrigin}, Update, false},
		{"no desired change depends on what changed", Decision{Result: Allow, Category: NoDesiredChange}, Update, false},
		{"drift", Decision{Result: Allow, Category: DriftUnapproved, Drift: true}, Update, false},
		{"drifting delete", Decision{Result: Allow, Category: DriftUnapproved, Drift: true}, Delete, false},
		{"denial", Decision{Result: Deny, Category: Frozen}, Update, false},
		{"denied delete", Decision{Result: Deny, Category: Frozen}, Delete, false},
		{"server check", Decision{Result: Allow, Category: Expected, ConfirmWithServer: true}, Update, false},
		{"controller recheck", Decision{Result: Allow, Category: Expected, RecheckController: true}, Update, false},
		{"approval to reserve", Decision{Result: Allow, Category: Expected, ApprovalsUpdate: &ApprovalsUpdate{}}, Update, false},
		{"once approval consumed", Decision{Result: Allow, Category: Expected, ConsumeOnce: true}, Delete, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.StandsOnMetadata(tc.op); got != tc.want {
				t.Errorf("StandsOnMetadata(%s) = %v, want %v", tc.op, got, tc.want)
			}
		})
	}
}
