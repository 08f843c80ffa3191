package policy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReadyCondition(t *testing.T) {
	long := strings.Repeat("x", maxConditionMessage)
	cases := []struct {
		name        string
		findings    []Finding
		suffix      string
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{name: "nothing wrong: ready, with the kind's own message", wantStatus: metav1.ConditionTrue, wantReason: "Compiled", wantMessage: "all good"},
		{
			name:        "every finding listed, the first one's reason",
			findings:    []Finding{{Reason: "Invalid", Text: "rule 0: bad"}, {Reason: "CostExceeded", Text: "rule 1: costly"}},
			suffix:      "; fix them",
			wantStatus:  metav1.ConditionFalse,
			wantReason:  "Invalid",
			wantMessage: "2 problem(s): rule 0: bad; rule 1: costly; fix them",
		},
		{
			name:        "a message beyond what a condition takes is cut",
			findings:    []Finding{{Reason: "Invalid", Text: long}},
			wantStatus:  metav1.ConditionFalse,
			wantReason:  "Invalid",
			wantMessage: ("1 problem(s): " + long)[:maxConditionMessage],
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ReadyCondition(7, tc.findings, "all good", tc.suffix)
			if got.Type != "Ready" || got.ObservedGeneration != 7 || got.Status != tc.wantStatus || got.Reason != tc.wantReason || got.Message != tc.wantMessage {
				t.Errorf("got %+v, want status %s reason %s message %q", got, tc.wantStatus, tc.wantReason, tc.wantMessage)
			}
		})
	}
}
