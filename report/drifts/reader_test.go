package drifts

import (
	"testing"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// A record says in which mode the write was decided and whether it was
// held, for the person reading the open drifts.
func TestObserveRecordsModeAndHeld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result decision.Result
		mode   annotations.DriftMode
		held   bool
	}{
		{name: "denied in enforce mode", result: decision.Deny, mode: annotations.ModeEnforce, held: true},
		{name: "allowed in log mode", result: decision.Allow, mode: annotations.ModeLog},
		{name: "forwarded in shadow mode", result: decision.Allow, mode: annotations.ModeShadow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(Options{Client: fake.NewClientset(), Objects: &noObjects{}, Log: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			d, w := detectedWrite("web", "cm", "controller")
			d.Result, d.Mode = tc.result, tc.mode
			l.Observe(d, w, nil)
			rec := <-l.intake
			if rec.State.Mode != tc.mode || rec.State.Held != tc.held {
				t.Errorf("mode %q, held %v; want %q, %v", rec.State.Mode, rec.State.Held, tc.mode, tc.held)
			}
		})
	}
}
