package notify

import (
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// The write-path cost of Observe in the common cases.
func BenchmarkObserve(b *testing.B) {
	parent := &decision.ParentInfo{Ref: parentDeploy.Ref(), Generation: 5, ObservedGeneration: 5}
	w := Write{Operation: decision.Update, Changes: []desired.Change{replicas(1, 3)}, FieldManager: "m"}
	expected := &decision.Decision{Category: decision.Expected, Result: decision.Allow, Parent: parent, Child: childRS.Ref()}
	detected := &decision.Decision{Category: decision.DriftUnapproved, Result: decision.Deny, Report: decision.ReportDetected,
		Parent: parent, Child: childRS.Ref()}
	other := &decision.Decision{Category: decision.Expected, Result: decision.Allow, Parent: parent, Child: child("other").Ref()}

	for _, bc := range []struct {
		name string
		open bool
		d    *decision.Decision
		want Result
	}{
		{"expected, nothing open", false, expected, NotOpen},
		{"expected, other pair open", true, other, NotOpen},
		{"detected, deduplicated", true, detected, Deduplicated},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// Not started: nothing is delivered.
			s, err := New(Config{URLs: []string{"http://127.0.0.1:1/"}})
			if err != nil {
				b.Fatal(err)
			}
			if bc.open {
				s.Observe(detected, w)
			}
			b.ReportAllocs()
			for b.Loop() {
				if got := s.Observe(bc.d, w); got != bc.want {
					b.Fatalf("Observe = %s, want %s", got, bc.want)
				}
			}
		})
	}
}
