package patch

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/validation"
)

// EffectiveFieldManager returns the field manager kube-apiserver records for a
// non-apply write: the fieldManager query parameter if set, else the
// User-Agent up to its first "/", without unprintable characters, cut to 128
// bytes (handlers.managerOrUserAgent). Apply requests must name a
// fieldManager; there is no default for them.
func EffectiveFieldManager(fieldManager, userAgent string) string {
	if fieldManager != "" {
		return fieldManager
	}
	prefix, _, _ := strings.Cut(userAgent, "/")
	var b strings.Builder
	for _, r := range prefix {
		if !unicode.IsPrint(r) {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > validation.FieldManagerMaxLength {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
