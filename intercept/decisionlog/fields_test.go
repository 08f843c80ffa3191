package decisionlog

import (
	"reflect"
	"strings"
	"testing"
)

// A mistake in a tag stops the proxy at start, with the field named, rather
// than writing a line without the field or under the wrong condition.
func TestPlanFieldsRejectsBrokenTags(t *testing.T) {
	tests := []struct {
		name    string
		value   any
		wantErr string
	}{
		{"no json name", struct {
			A string
		}{}, "A: it has no json name"},
		{"a condition on a missing field", struct {
			A string `json:"a" log:"if=B"`
		}{}, `names "B", which is no field`},
		{"a condition on a number", struct {
			N int    `json:"n"`
			A string `json:"a" log:"if=N"`
		}{}, `"N" is a int, not a bool or a string`},
		{"an unknown option", struct {
			A string `json:"a" log:"always"`
		}{}, `unknown log tag option "always"`},
		{"a type the log does not write", struct {
			M map[string]string `json:"m"`
		}{}, "the log writes no map[string]string"},
		{"a log name on a field json names", struct {
			A string `json:"a" log:"name=b"`
		}{}, `named "a" by its json tag`},
		{"a log tag on a json \"-\" field without a name", struct {
			A string `json:"-" log:"omitempty"`
		}{}, "its log tag must name it"},
		{"not a struct", "", "is not a struct"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := planFields(reflect.TypeOf(tt.value))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}
