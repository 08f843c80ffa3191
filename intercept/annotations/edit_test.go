package annotations

import (
	"maps"
	"strings"
	"testing"
	"time"
)

func TestAddApproval(t *testing.T) {
	st := Stamp{User: "carol", At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	a := Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-6d4", Generation: 4, Mode: ApprovalOnce}
	const added = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":4,"mode":"once","user":"carol","at":"2026-03-01T12:00:00Z"}`
	const odd = `{ "kind": "broken", "note": "kept" }`
	tests := []struct {
		name, current, want string
		unchanged           bool
		err                 string
	}{
		{name: "first", current: "", want: "[" + added + "]"},
		{name: "entries it cannot read are kept as written", current: "[" + odd + "]", want: "[" + odd + "," + added + "]"},
		{name: "an equal entry is not added twice", current: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":4}]`, unchanged: true},
		{name: "not an array", current: `{"a":1}`, err: "not a JSON array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := AddApproval(tt.current, a, st)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Unchanged != tt.unchanged || (!tt.unchanged && e.Set[Approvals] != tt.want) {
				t.Errorf("got %+v, want %s", e, tt.want)
			}
		})
	}
}

func TestAddRejection(t *testing.T) {
	st := Stamp{User: "dave", At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	r := Rejection{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-6d4", Reason: "needs review"}
	e, err := AddRejection(`[{"apiVersion":"v1","kind":"ConfigMap","name":"c","reason":"x","ticket":"OPS-1"}]`, r, st)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"apiVersion":"v1","kind":"ConfigMap","name":"c","reason":"x","ticket":"OPS-1"},{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","reason":"needs review","user":"dave","at":"2026-03-01T12:00:00Z"}]`
	if got := e.Set[Rejections]; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := AddRejection(`[{"reason":`, r, st); err == nil {
		t.Error("a malformed rejections value was rewritten")
	}
	if _, err := AddRejection("", Rejection{Name: "x"}, st); err == nil {
		t.Error("a rejection without a reason was accepted")
	}
	if e, _ := AddRejection(want, r, st); !e.Unchanged {
		t.Errorf("an equal rejection was added again: %+v", e)
	}
}

func TestFreezeAndSnooze(t *testing.T) {
	st := Stamp{User: "carol", At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e, err := SetFreeze("true", "incident 42", st)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.Set[Freeze], `{"user":"carol","reason":"incident 42","at":"2026-03-01T12:00:00Z"}`; got != want {
		t.Errorf("freeze %s, want %s", got, want)
	}
	if _, err := SetFreeze("", " ", st); err == nil {
		t.Error("a freeze without a reason was accepted")
	}
	if u := Unfreeze(""); !u.Unchanged {
		t.Errorf("unfreeze of an unfrozen parent: %+v", u)
	}
	if u := Unfreeze("true"); len(u.Remove) != 1 || u.Remove[0] != Freeze {
		t.Errorf("unfreeze: %+v", u)
	}

	s, err := SetSnooze(2*time.Hour, "known", st)
	if err != nil {
		t.Fatal(err)
	}
	if s.Set[SnoozeUntil] != "2026-03-01T14:00:00Z" || s.Set[Snooze] != `{"expiry":"2026-03-01T14:00:00Z","user":"carol","message":"known"}` {
		t.Errorf("snooze %+v", s.Set)
	}
	if _, err := SetSnooze(0, "", st); err == nil {
		t.Error("a zero snooze was accepted")
	}
	if u := Unsnooze(s.Set); len(u.Remove) != 2 {
		t.Errorf("unsnooze %+v", u)
	}
}

func TestEditApply(t *testing.T) {
	ann := map[string]string{"keep": "1", Freeze: "true", Approvals: "[]"}
	tests := []struct {
		name string
		edit Edit
		want map[string]string
	}{
		{"set and remove", Edit{Set: map[string]string{Approvals: "[x]"}, Remove: []string{Freeze}}, map[string]string{"keep": "1", Approvals: "[x]"}},
		{"unchanged", Edit{Unchanged: true, Set: map[string]string{"keep": "2"}}, ann},
		{"remove a key that is not there", Edit{Remove: []string{Snooze}}, ann},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.edit.Apply(ann)
			if !maps.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if len(ann) != 3 || ann[Freeze] != "true" || ann[Approvals] != "[]" {
				t.Errorf("the input was changed: %v", ann)
			}
		})
	}
	if got := (Edit{Set: map[string]string{Freeze: "true"}}).Apply(nil); got[Freeze] != "true" {
		t.Errorf("apply to no annotations: %v", got)
	}
}

// An equal entry only the parent's controller gave approves none of its
// drift: a person's approve adds a stamped one of its own, which the
// record does not hold.
func TestAddApprovalBesideAnEntryOnlyTheControllerGave(t *testing.T) {
	st := Stamp{User: "carol", At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	a := Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-6d4", Generation: 4, Mode: ApprovalOnce}
	const prewritten = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":4,"mode":"once"}`
	digest := EntryDigest([]byte(prewritten))
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		unchanged bool
	}{
		{name: "given around the proxy", ann: map[string]string{}, unchanged: true},
		{name: "given by a person through the proxy", ann: map[string]string{ApprovalsBy: "alice:" + digest, Controllers: "ctrl"}, unchanged: true},
		{name: "given by the recorded controller", ann: map[string]string{ApprovalsBy: "ctrl:" + digest, Controllers: "ctrl"}},
		{name: "given by a writer while no record names the controller", ann: map[string]string{ApprovalsBy: "ctrl:" + digest}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := maps.Clone(tc.ann)
			ann[Approvals] = "[" + prewritten + "]"
			e, err := AddApprovalTo(ann, a, st)
			if err != nil {
				t.Fatal(err)
			}
			if e.Unchanged != tc.unchanged {
				t.Fatalf("unchanged %v (%s), want %v", e.Unchanged, e.Summary, tc.unchanged)
			}
			if !tc.unchanged && !strings.Contains(e.Set[Approvals], `"user":"carol"`) {
				t.Errorf("approvals %s hold no stamped entry of carol's", e.Set[Approvals])
			}
		})
	}
}
