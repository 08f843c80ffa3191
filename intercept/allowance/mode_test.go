package allowance

import (
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

func TestModeOf(t *testing.T) {
	m := func(v string) map[string]string { return map[string]string{annotations.AllowanceMode: v} }
	tests := []struct {
		name       string
		stored, ns map[string]string
		want       Mode
		warns      bool
	}{
		{"off by default", nil, nil, ModeOff, false},
		{"the namespace's", nil, m("log"), ModeLog, false},
		{"the object's wins", m("shadow"), m("enforce"), ModeShadow, false},
		{"an empty object value falls back to the namespace", m(" "), m("enforce"), ModeEnforce, false},
		{"case and spaces", m(" Enforce "), nil, ModeEnforce, false},
		{"unknown counts as enforce, with a warning", m("strict"), m("log"), ModeEnforce, true},
	}
	for _, tt := range tests {
		got, w := ModeOf(tt.stored, tt.ns)
		if got != tt.want || (w != nil) != tt.warns {
			t.Errorf("%s: %q, warning %v; want %q, warning %v", tt.name, got, w, tt.want, tt.warns)
		}
	}
}
