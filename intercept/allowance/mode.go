package allowance

import (
	"fmt"
	"strings"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// Mode says what a violation does. Allowances are opt-in: without a mode
// they are not checked at all.
type Mode string

// Modes of kausality.io/allowance-mode.
const (
	// ModeOff: allowances are neither granted nor checked.
	ModeOff Mode = ""
	// ModeShadow: violations are logged; the write is forwarded untouched.
	ModeShadow Mode = "shadow"
	// ModeLog: violations are allowed with a warning and reported.
	ModeLog Mode = "log"
	// ModeEnforce: violations are denied.
	ModeEnforce Mode = "enforce"
)

// ModeOf is the allowance mode of an object: its stored
// kausality.io/allowance-mode, else its namespace's. A value it does not
// know counts as enforce, with a warning: someone meant to turn
// allowances on.
func ModeOf(stored, namespace map[string]string) (Mode, *annotations.Warning) {
	for _, src := range []struct {
		ann  map[string]string
		what string
	}{{stored, "object"}, {namespace, "namespace"}} {
		v, ok := src.ann[annotations.AllowanceMode]
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		switch m := Mode(strings.ToLower(strings.TrimSpace(v))); m {
		case ModeShadow, ModeLog, ModeEnforce:
			return m, nil
		}
		return ModeEnforce, &annotations.Warning{Annotation: annotations.AllowanceMode, Object: src.what,
			Err: fmt.Errorf("unknown allowance mode %q (want shadow, log or enforce)", v), Effect: "treated as enforce"}
	}
	return ModeOff, nil
}
