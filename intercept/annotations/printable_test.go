package annotations

import "testing"

func TestPrintable(t *testing.T) {
	tests := []struct{ name, in, want, lines string }{
		{"plain text", "incident 42: ops@example.com", "incident 42: ops@example.com", ""},
		{"printable Unicode is kept", "Störung — 事故 ✓", "Störung — 事故 ✓", ""},
		{"an escape sequence that clears the screen", "x\x1b[2J\x1b[Hok", `x\x1b[2J\x1b[Hok`, ""},
		{"an OSC hyperlink", "\x1b]8;;http://evil\x07click\x1b]8;;\x07", `\x1b]8;;http://evil\x07click\x1b]8;;\x07`, ""},
		{"line breaks and carriage returns", "a\r\nb", `a\x0d\x0ab`, "a\\x0d\nb"},
		{"a C1 control", "a\u009bb", `a\x9bb`, ""},
		{"a bidirectional override", "user\u202eevil", `user\u202eevil`, ""},
		{"invalid UTF-8", "a\xffb", `a\xffb`, ""},
		{"tabs", "a\tb", `a\x09b`, "a\tb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Printable(tt.in); got != tt.want {
				t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
			}
			want := tt.lines
			if want == "" {
				want = tt.want
			}
			if got := PrintableLines(tt.in); got != want {
				t.Errorf("PrintableLines(%q) = %q, want %q", tt.in, got, want)
			}
		})
	}
}

func TestResetControllers(t *testing.T) {
	if e := ResetControllers(""); !e.Unchanged {
		t.Errorf("no record: %+v", e)
	}
	e := ResetControllers("4fems9t5ugy3x769")
	if e.Unchanged || len(e.Set) != 1 || e.Set[Controllers] != "" || len(e.Remove) != 0 {
		t.Errorf("reset: %+v (the empty value, not a removal, asks the proxy to forget the record)", e)
	}
}
