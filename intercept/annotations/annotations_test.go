package annotations

import (
	"reflect"
	"testing"
	"time"
)

func TestClassification(t *testing.T) {
	tests := []struct {
		key                        string
		kausality, system, control bool
		label                      string
	}{
		{Trace, true, true, false, ""},
		{Updaters, true, true, false, ""},
		{Controllers, true, true, false, ""},
		{Phase, true, true, false, ""},
		{ObservedGeneration, true, true, false, ""},
		{LegacyInitialized, true, true, false, ""},
		{Reservations, true, true, false, ""},
		{ApprovalsBy, true, true, false, ""},
		{ModesBy, true, true, false, ""},
		{Allowances, true, true, false, ""},
		{"kausal.io/other", false, false, false, ""},
		{Approvals, true, false, true, ""},
		{Rejections, true, false, true, ""},
		{Freeze, true, false, true, ""},
		{SnoozeUntil, true, false, true, ""},
		{Snooze, true, false, true, ""},
		{Mode, true, false, true, ""},
		{AllowanceMode, true, false, true, ""},
		{"kausality.io/trace-ticket", true, false, false, "ticket"},
		{"kausality.io/trace-", true, false, false, ""},
		{"kausality.io/future", true, false, false, ""},
		{"example.com/trace", false, false, false, ""},
		{"kausality.io", false, false, false, ""},
		{"example.com/approvals", false, false, false, ""},
	}
	for _, tt := range tests {
		if got := IsKausality(tt.key); got != tt.kausality {
			t.Errorf("IsKausality(%q) = %v", tt.key, got)
		}
		if got := IsSystem(tt.key); got != tt.system {
			t.Errorf("IsSystem(%q) = %v", tt.key, got)
		}
		if got := IsControl(tt.key); got != tt.control {
			t.Errorf("IsControl(%q) = %v", tt.key, got)
		}
		if got := TraceLabel(tt.key); got != tt.label {
			t.Errorf("TraceLabel(%q) = %q", tt.key, got)
		}
	}
}

func TestParseApprovals(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     []Approval
		warnings []string
	}{
		{name: "empty", in: ""},
		{name: "blank", in: "  "},
		{name: "null", in: "null"},
		{
			name: "valid",
			in:   `[{"apiVersion":"v1","kind":"ConfigMap","name":"bar","generation":5,"mode":"once"},{"apiVersion":"v1","kind":"Secret","name":"credentials","mode":"always"}]`,
			want: []Approval{
				{APIVersion: "v1", Kind: "ConfigMap", Name: "bar", Generation: 5, Mode: ApprovalOnce},
				{APIVersion: "v1", Kind: "Secret", Name: "credentials", Mode: ApprovalAlways},
			},
		},
		{
			name:     "broken JSON is no approvals",
			in:       `[{"apiVersion":"v1",`,
			warnings: []string{"kausality: malformed annotation kausality.io/approvals: unexpected end of JSON input; treated as no approvals"},
		},
		{
			name:     "object instead of array",
			in:       `{"apiVersion":"v1"}`,
			warnings: []string{"kausality: malformed annotation kausality.io/approvals: want a JSON array of approvals, got object; treated as no approvals"},
		},
		{
			name: "bad entries are no approvals",
			in:   `[{"apiVersion":"v1","kind":"ConfigMap"},{"apiVersion":"v1","kind":"ConfigMap","name":"a","mode":"forever"},{"apiVersion":"v1","kind":"ConfigMap","name":"b","generation":2}]`,
			want: []Approval{{APIVersion: "v1", Kind: "ConfigMap", Name: "b", Generation: 2}},
			warnings: []string{
				"kausality: malformed annotation kausality.io/approvals: entry 0: apiVersion, kind and name are required; entry ignored (kept as written)",
				`kausality: malformed annotation kausality.io/approvals: entry 1: unknown mode "forever" (want once, generation or always); entry ignored (kept as written)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ws := ParseApprovals(tt.in)
			if len(got) == 0 && len(tt.want) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("approvals = %#v, want %#v", got, tt.want)
			}
			var wsText []string
			for _, w := range ws {
				wsText = append(wsText, w.String())
			}
			if !reflect.DeepEqual(wsText, tt.warnings) {
				t.Errorf("warnings = %q, want %q", wsText, tt.warnings)
			}
		})
	}
}

// Every entry comes back with its raw form, valid or not, so that a
// rewrite can put back byte for byte what it does not mean to remove.
func TestParseApprovalEntries(t *testing.T) {
	const (
		valid    = `{"apiVersion":"v1","kind":"ConfigMap","name":"a","generation":2}`
		extra    = `{ "apiVersion": "v1", "kind": "ConfigMap", "name": "b", "mode": "always", "note": "ticket 7" }`
		noName   = `{"apiVersion":"v1","kind":"ConfigMap"}`
		badMode  = `{"apiVersion":"v1","kind":"ConfigMap","name":"c","mode":"forever"}`
		badType  = `{"apiVersion":"v1","kind":"ConfigMap","name":"d","generation":"3"}`
		notObj   = `"approve everything"`
		nullItem = `null`
	)
	tests := []struct {
		name     string
		in       string
		ok       bool
		raws     []string
		valid    []bool
		warnings int
	}{
		{name: "empty", in: "", ok: true},
		{name: "null", in: "null", ok: true},
		{name: "empty array", in: "[]", ok: true},
		{name: "broken JSON", in: "[" + valid + ",{", warnings: 1},
		{name: "object", in: valid, warnings: 1},
		{name: "valid entries keep their bytes, unknown fields and spacing included", in: "[" + valid + ",  " + extra + "\n]", ok: true,
			raws: []string{valid, extra}, valid: []bool{true, true}},
		{name: "invalid entries are kept in place", in: "[" + noName + "," + valid + "," + badMode + "," + badType + "," + notObj + "," + nullItem + "]", ok: true,
			raws: []string{noName, valid, badMode, badType, notObj, nullItem}, valid: []bool{false, true, false, false, false, false}, warnings: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, ws, ok := ParseApprovalEntries(tt.in)
			if ok != tt.ok || len(ws) != tt.warnings || len(entries) != len(tt.raws) {
				t.Fatalf("ok %v, %d warnings %v, %d entries; want ok %v, %d warnings, %d entries", ok, len(ws), ws, len(entries), tt.ok, tt.warnings, len(tt.raws))
			}
			for i, e := range entries {
				if string(e.Raw) != tt.raws[i] || e.Valid != tt.valid[i] {
					t.Errorf("entry %d: raw %s valid %v, want %s %v", i, e.Raw, e.Valid, tt.raws[i], tt.valid[i])
				}
				if !e.Valid && e.Approval != (Approval{}) {
					t.Errorf("entry %d: an invalid entry carries an approval %+v", i, e.Approval)
				}
			}
		})
	}
}

func TestEncodeApprovalEntries(t *testing.T) {
	const (
		odd   = `{"apiVersion":"v1","kind":"ConfigMap","mode":"forever"}`
		noted = `{ "apiVersion": "v1", "kind": "Secret", "name": "s", "mode": "always", "note": "ticket 7" }`
	)
	own := Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "r", Generation: 3, Mode: ApprovalOnce}
	tests := []struct {
		name string
		in   []ApprovalEntry
		want string
	}{
		{"nothing removes the annotation", nil, ""},
		{"entries as written, in order", []ApprovalEntry{{Raw: []byte(odd)}, {Raw: []byte(noted), Valid: true}},
			"[" + odd + "," + noted + "]"},
		{"an entry without a raw form is encoded", []ApprovalEntry{{Raw: []byte(odd)}, {Approval: own, Valid: true}, NewApprovalEntry(own)},
			"[" + odd + `,{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"r","generation":3,"mode":"once"},{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"r","generation":3,"mode":"once"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EncodeApprovalEntries(tt.in); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	// Parsing and encoding a value in compact form gives it back.
	v := "[" + odd + "," + noted + "]"
	entries, _, _ := ParseApprovalEntries(v)
	if got := EncodeApprovalEntries(entries); got != v {
		t.Errorf("round trip: got %s, want %s", got, v)
	}
}

func TestParseRejections(t *testing.T) {
	got, w := ParseRejections(`[{"apiVersion":"example.com/v1alpha1","kind":"NodePool","name":"pool-1","generation":5,"reason":"Destructive change, needs SRE review"}]`)
	want := []Rejection{{APIVersion: "example.com/v1alpha1", Kind: "NodePool", Name: "pool-1", Generation: 5, Reason: "Destructive change, needs SRE review"}}
	if w != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, %v", got, w)
	}
	if got, w := ParseRejections(""); got != nil || w != nil {
		t.Errorf("empty: %v %v", got, w)
	}
	got, w = ParseRejections(`[{"reason":}]`)
	if got != nil || w == nil {
		t.Fatalf("malformed: %v %v", got, w)
	}
	if want := "kausality: malformed annotation kausality.io/rejections: invalid character '}' looking for beginning of value; treated as rejected"; w.String() != want {
		t.Errorf("warning %q, want %q", w.String(), want)
	}
}

// A rejection that parses but would match nothing its author meant is as
// broken as one that does not parse: it counts as rejecting every child,
// not as no rejection.
func TestParseRejectionsThatMatchNothingCountAsBroken(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`[null]`, "entry 0: not an object"},
		{`[1]`, "entry 0: json: cannot unmarshal number into Go value of type map[string]json.RawMessage"},
		{`[{"kind":"ReplicaSet","name":"web-1"}]`, `entry 0: apiVersion, kind and name are required ("*" matches any)`},
		{`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"*"},{"apiVersion":"apps/v1","kind":"ReplicaSet"}]`, `entry 1: apiVersion, kind and name are required ("*" matches any)`},
		{`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-*"}]`, `entry 0: "web-*" is no pattern: a field is a value or "*", which matches any`},
		{`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":-1}]`, "entry 0: generation -1 is negative (0 means every generation)"},
		{`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":"5"}]`, "entry 0: json: cannot unmarshal string into Go struct field Rejection.generation of type int64"},
	} {
		got, w := ParseRejections(tc.value)
		if got != nil || w == nil {
			t.Errorf("%s: got %v %v, want a warning", tc.value, got, w)
			continue
		}
		if want := "kausality: malformed annotation kausality.io/rejections: " + tc.want + "; treated as rejected"; w.String() != want {
			t.Errorf("%s: warning %q, want %q", tc.value, w.String(), want)
		}
	}
	// Wildcards and a generation of 0 are valid.
	if got, w := ParseRejections(`[{"apiVersion":"*","kind":"*","name":"*"},{"apiVersion":"v1","kind":"ConfigMap","name":"cfg","generation":0}]`); w != nil || len(got) != 2 {
		t.Errorf("valid rejections: %v %v", got, w)
	}
}

func TestParseFreeze(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    *FreezeInfo
		warning string
		text    string
	}{
		{name: "unset", in: ""},
		{name: "false", in: "false"},
		{name: "true", in: "true", want: &FreezeInfo{}, text: "frozen (no user or reason given)"},
		{name: "true with spaces", in: " true ", want: &FreezeInfo{}, text: "frozen (no user or reason given)"},
		{
			name: "object",
			in:   `{"user":"alice@example.com","reason":"incident 42","at":"2026-01-24T10:30:00Z"}`,
			want: &FreezeInfo{User: "alice@example.com", Reason: "incident 42", At: "2026-01-24T10:30:00Z"},
			text: "frozen by alice@example.com at 2026-01-24T10:30:00Z: incident 42",
		},
		{
			name: "reference message alias",
			in:   `{"user":"bob","message":"maintenance"}`,
			want: &FreezeInfo{User: "bob", Message: "maintenance"},
			text: "frozen by bob: maintenance",
		},
		{
			name:    "broken JSON is frozen",
			in:      `{"user":"alice"`,
			want:    &FreezeInfo{Malformed: true},
			warning: "kausality: malformed annotation kausality.io/freeze: unexpected end of JSON input; treated as frozen",
			text:    "frozen (malformed kausality.io/freeze annotation; treated as frozen)",
		},
		{
			name:    "yes is frozen",
			in:      `yes`,
			want:    &FreezeInfo{Malformed: true},
			warning: "kausality: malformed annotation kausality.io/freeze: invalid character 'y' looking for beginning of value; treated as frozen",
			text:    "frozen (malformed kausality.io/freeze annotation; treated as frozen)",
		},
		{
			name:    "JSON null is frozen",
			in:      `null`,
			want:    &FreezeInfo{Malformed: true},
			warning: `kausality: malformed annotation kausality.io/freeze: want "true" or a JSON object {"user":..,"reason":..,"at":..}; treated as frozen`,
			text:    "frozen (malformed kausality.io/freeze annotation; treated as frozen)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, w := ParseFreeze(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			if ws := warningText(w); ws != tt.warning {
				t.Errorf("warning %q, want %q", ws, tt.warning)
			}
			if got != nil && got.String() != tt.text {
				t.Errorf("text %q, want %q", got.String(), tt.text)
			}
		})
	}
}

func TestParseSnooze(t *testing.T) {
	ts := time.Date(2026, 1, 25, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		in      map[string]string
		want    *SnoozeInfo
		warning string
	}{
		{name: "unset", in: nil},
		{name: "snooze-until", in: map[string]string{SnoozeUntil: "2026-01-25T00:00:00Z"}, want: &SnoozeInfo{Until: ts, Annotation: SnoozeUntil}},
		{name: "snooze-until wins", in: map[string]string{SnoozeUntil: "2026-01-25T00:00:00Z", Snooze: "2030-01-01T00:00:00Z"}, want: &SnoozeInfo{Until: ts, Annotation: SnoozeUntil}},
		{name: "reference snooze timestamp", in: map[string]string{Snooze: "2026-01-25T00:00:00Z"}, want: &SnoozeInfo{Until: ts, Annotation: Snooze}},
		{name: "reference snooze JSON", in: map[string]string{Snooze: `{"expiry":"2026-01-25T00:00:00Z","user":"bob","message":"known"}`}, want: &SnoozeInfo{Until: ts, User: "bob", Message: "known", Annotation: Snooze}},
		{
			name:    "malformed snooze-until is not snoozed",
			in:      map[string]string{SnoozeUntil: "tomorrow"},
			warning: `kausality: malformed annotation kausality.io/snooze-until: parsing time "tomorrow" as "2006-01-02T15:04:05Z07:00": cannot parse "tomorrow" as "2006"; treated as not snoozed`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, w := ParseSnooze(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			if ws := warningText(w); ws != tt.warning {
				t.Errorf("warning %q, want %q", ws, tt.warning)
			}
		})
	}
	s := &SnoozeInfo{Until: ts}
	if !s.ActiveAt(ts.Add(-time.Second)) || s.ActiveAt(ts) || s.ActiveAt(ts.Add(time.Hour)) {
		t.Error("ActiveAt wrong")
	}
	var nilS *SnoozeInfo
	if nilS.ActiveAt(ts) {
		t.Error("nil snooze active")
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		mode    DriftMode
		set     bool
		warning string
	}{
		{"", "", false, ""},
		{"log", ModeLog, true, ""},
		{"enforce", ModeEnforce, true, ""},
		{" Enforce ", ModeEnforce, true, ""},
		{"LOG", ModeLog, true, ""},
		{"shadow", ModeEnforce, true, `kausality: malformed annotation kausality.io/mode: unknown mode "shadow" (want log or enforce); treated as enforce`},
	}
	for _, tt := range tests {
		m, set, w := ParseMode(tt.in)
		if ws := warningText(w); m != tt.mode || set != tt.set || ws != tt.warning {
			t.Errorf("ParseMode(%q) = %q %v %q", tt.in, m, set, ws)
		}
	}
}

func TestWarningWithObject(t *testing.T) {
	w := Warning{Annotation: Approvals, Object: "parent apps/v1 Deployment default/web", Effect: "treated as no approvals"}
	if got, want := w.String(), "kausality: malformed annotation kausality.io/approvals on parent apps/v1 Deployment default/web; treated as no approvals"; got != want {
		t.Errorf("got %q", got)
	}
}

func TestReservations(t *testing.T) {
	v := AddReservation("", "kausality-reservation-a", "da")
	v = AddReservation(v, "kausality-reservation-b", "db")
	v = AddReservation(v, "kausality-reservation-a", "forged")
	if v != "kausality-reservation-a=da,kausality-reservation-b=db" {
		t.Fatalf("after adding a, b and a again: %q", v)
	}
	if !HasReservation(v, "kausality-reservation-b") || HasReservation(v, "kausality-reservation-c") || HasReservation(v, "") {
		t.Errorf("HasReservation of %q is wrong", v)
	}
	digests := []struct {
		value, id, digest string
		named             bool
	}{
		{v, "kausality-reservation-a", "da", true},
		{v, "kausality-reservation-b", "db", true},
		{v, "kausality-reservation-c", "", false},
		{v, "", "", false},
		// A name the proxy wrote before records had digests vouches for
		// no content.
		{"kausality-reservation-old", "kausality-reservation-old", "", true},
		{" kausality-reservation-a = da ", "kausality-reservation-a", "da", true},
		{"kausality-reservation-a=da", "kausality-reservation-a=da", "", false},
	}
	for _, tc := range digests {
		if digest, named := ReservationDigest(tc.value, tc.id); digest != tc.digest || named != tc.named {
			t.Errorf("ReservationDigest(%q, %q) = %q %v, want %q %v", tc.value, tc.id, digest, named, tc.digest, tc.named)
		}
	}
	rest, found := RemoveReservation(v, "kausality-reservation-a")
	if !found || rest != "kausality-reservation-b=db" {
		t.Errorf("removing a: %q %v", rest, found)
	}
	rest, found = RemoveReservation(rest, "kausality-reservation-a")
	if found || rest != "kausality-reservation-b=db" {
		t.Errorf("removing a again: %q %v", rest, found)
	}
	if rest, found = RemoveReservation(" kausality-reservation-b=db ,", "kausality-reservation-b"); !found || rest != "" {
		t.Errorf("removing the last one: %q %v", rest, found)
	}
	if rest, found = RemoveReservation("kausality-reservation-old,kausality-reservation-b=db", "kausality-reservation-old"); !found || rest != "kausality-reservation-b=db" {
		t.Errorf("removing a name without a digest: %q %v", rest, found)
	}
}

// warningText is the warning as the proxy writes it, "" for none.
func warningText(w *Warning) string {
	if w == nil {
		return ""
	}
	return w.String()
}
