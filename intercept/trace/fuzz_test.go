package trace

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// A parent's trace is whatever its annotation says. Extending it always
// yields a JSON array of hop objects that ends with the new hop: the
// parent's hops when they are well-formed, the hop alone (and
// ErrMalformed) when they are not.
func FuzzExtend(f *testing.F) {
	for _, seed := range []string{
		`[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":5,"user":"alice","timestamp":"2026-01-24T10:00:00Z"}]`,
		"[ {\"kind\" : \"X\" } ]", `[]`, `[1]`, `{"a":1}`, `[{"a":"\u2028"}]`, `[{}`, "",
	} {
		f.Add(seed, "web-1", "trace-ticket")
	}
	f.Fuzz(func(t *testing.T, parent, name, label string) {
		hop := &Hop{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, Generation: 2, User: "u",
			Timestamp: time.Date(2026, 1, 24, 10, 30, 0, 0, time.UTC), Labels: map[string]string{label: name}}
		out, err := Extend(parent, hop)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("unexpected error: %v", err)
		}
		// A hop's members the proxy does not know are carried as written,
		// numbers of any size included: JSON bounds none, so neither
		// does the check.
		var hops []map[string]any
		dec := json.NewDecoder(strings.NewReader(out))
		dec.UseNumber()
		if jerr := dec.Decode(&hops); jerr != nil || len(hops) == 0 {
			t.Fatalf("the extended trace is not an array of hops: %q (%v)", out, jerr)
		}
		// JSON carries names as UTF-8: invalid bytes become U+FFFD.
		encoded, _ := json.Marshal(hop.Name)
		var want string
		_ = json.Unmarshal(encoded, &want)
		if got, _ := hops[len(hops)-1]["name"].(string); got != want {
			t.Fatalf("the last hop is not the new one: %q", out)
		}
		if err != nil && len(hops) != 1 {
			t.Fatalf("a malformed parent trace must restart the trace: %q", out)
		}
	})
}
