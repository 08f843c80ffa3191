package annotations

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns s with every rune a terminal would not simply show
// (control characters, escape sequences' ESC, bidirectional overrides,
// invalid UTF-8) replaced by its Go escape, such as \x1b or \u202e. Text
// taken from annotations (freeze and snooze messages, approval and
// rejection reasons, user names) reaches people's terminals through
// kubectl and the plugin: written as is, it could rewrite what they see.
// Printable Unicode is kept as written.
func Printable(s string) string {
	if strings.IndexFunc(s, needsEscape) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case needsEscape(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r) && r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

func needsEscape(r rune) bool { return !unicode.IsGraphic(r) }

// PrintableLines is Printable for text made of lines: line breaks and tabs
// are kept.
func PrintableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		parts := strings.Split(l, "\t")
		for j, p := range parts {
			parts[j] = Printable(p)
		}
		lines[i] = strings.Join(parts, "\t")
	}
	return strings.Join(lines, "\n")
}
