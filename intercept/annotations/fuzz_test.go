package annotations

import (
	"reflect"
	"testing"
)

// People edit these annotations by hand. Whatever they write, parsing never
// panics, and the approvals the proxy rewrites come back as they were: an
// encoded list parses to the same entries, unreadable ones included.
func FuzzParseAnnotations(f *testing.F) {
	for _, seed := range []string{
		`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":3,"mode":"once"}]`,
		`[{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"},{"kind":"x"},7,null]`,
		`{"user":"alice","message":"incident","at":"2026-01-24T10:30:00Z"}`,
		`true`, `[`, `2026-01-24T10:30:00Z`, `enforce`, "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		entries, _, ok := ParseApprovalEntries(v)
		_, _ = ParseApprovals(v)
		_, _ = ParseRejections(v)
		_, _ = ParseFreeze(v)
		_, _ = ParseSnooze(map[string]string{SnoozeUntil: v})
		_, _, _ = ParseMode(v)
		if !ok || len(entries) == 0 {
			return
		}
		again, _, ok := ParseApprovalEntries(EncodeApprovalEntries(entries))
		if !ok {
			t.Fatalf("the encoding of parsed approvals does not parse: %q", EncodeApprovalEntries(entries))
		}
		for i := range entries {
			entries[i].Raw, again[i].Raw = nil, nil
		}
		if !reflect.DeepEqual(entries, again) {
			t.Fatalf("approvals changed in a round trip:\n%+v\n%+v", entries, again)
		}
	})
}
