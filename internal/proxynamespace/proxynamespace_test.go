package proxynamespace

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestMissing(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a write into a namespace that does not exist", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "kausality-system"), true},
		{"wrapped", fmt.Errorf("recording: %w", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "kausality-system")), true},
		// The object itself is missing: the namespace exists.
		{"a missing ConfigMap", apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "kausality-drift-1"), false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("no")), false},
		{"not an API error", errors.New("connection refused"), false},
		{"no error", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Missing(tt.err); got != tt.want {
				t.Fatalf("Missing(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// The error a person reads names the namespace, the flag, and how to
// create the namespace.
func TestMissingErrorSaysWhatToDo(t *testing.T) {
	msg := MissingError("team-proxy").Error()
	for _, want := range []string{`"team-proxy"`, "--drift-namespace", "kubectl create namespace team-proxy"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not contain %q", msg, want)
		}
	}
}
