package kubectlplugin

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// Text output carries annotation text that anybody who may edit a parent
// wrote; a terminal must show it, not act on it.
func TestTextOutputIsPrintable(t *testing.T) {
	tests := []struct{ output, in, want string }{
		{"", "frozen: incident\x1b[2J 42 ✓\n\tby ops\u202e\n", "frozen: incident\\x1b[2J 42 ✓\n\tby ops\\u202e\n"},
		{"json", "x", "\"x\"\n"},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		o := &options{out: &buf, output: tt.output}
		err := o.print(tt.in, func(w io.Writer) { fmt.Fprint(w, tt.in) })
		if err != nil {
			t.Fatal(err)
		}
		if got := buf.String(); got != tt.want {
			t.Errorf("-o %q: got %q, want %q", tt.output, got, tt.want)
		}
		if strings.ContainsAny(buf.String(), "\x1b\u202e") {
			t.Errorf("-o %q: control characters in %q", tt.output, buf.String())
		}
	}
}
