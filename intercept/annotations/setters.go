package annotations

import (
	"crypto/sha256"
	"encoding/base64"
	"math/big"
	"strings"
)

// ModeKeys are the modes an object or a namespace holds over how the
// writes under it are gated, which ModesBy records the setters of.
var ModeKeys = [...]string{Mode, AllowanceMode}

// ModesOf are the modes of ann (an object's or a namespace's annotations)
// with their record, nil without any.
func ModesOf(ann map[string]string) map[string]string {
	var out map[string]string
	for _, k := range [...]string{Mode, AllowanceMode, ModesBy} {
		if v, ok := ann[k]; ok {
			if out == nil {
				out = make(map[string]string, 3)
			}
			out[k] = v
		}
	}
	return out
}

// Digest names a value by 80 bits of its SHA-256, in base36: a writer
// cannot choose a value that shares another's digest.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	s := new(big.Int).SetBytes(sum[:10]).Text(36)
	return strings.Repeat("0", digestLen-len(s)) + s
}

const digestLen = 16

// removed is the digest the record gives a mode a write removed.
const removed = "-"

// maxPrior bounds the value before a change that the record keeps: the
// modes are single words, and a longer value is not one.
const maxPrior = 64

// ModeSetting is what kausality.io/modes-by says of one mode: who set
// the value the object holds (or removed it), and what it was before.
type ModeSetting struct {
	// User is the setter's user hash; "" when the record does not name
	// the object's value.
	User string
	// Prior is the value before the setter changed it, if HadPrior.
	Prior    string
	HadPrior bool
}

// RecordModeSetters is an object's kausality.io/modes-by after a write by
// user took its annotations from old to new, where it asked for requested.
// Each mode the write sets or removes as asked is user's, with what it was
// before (a setter who changes its own value again keeps the value from
// before its first change); one the proxy set otherwise than asked is
// nobody's; a mode the write leaves keeps its setting while the record
// still names its value (a value changed around the proxy has none).
func RecordModeSetters(record string, old, new, requested map[string]string, user string) string {
	known := parseModeSetters(record)
	var b strings.Builder
	for _, k := range ModeKeys {
		v, set := new[k]
		was, had := old[k]
		asked, asks := requested[k]
		s, recorded := known[short(k)]
		recorded = recorded && s.digest == digestOf(was, had)
		var entry modeSetter
		switch {
		case set == had && v == was:
			if !recorded {
				continue
			}
			entry = s
		case set != asks || v != asked:
			continue
		case recorded && s.user == user:
			entry = modeSetter{user: user, digest: digestOf(v, set), prior: s.prior, hadPrior: s.hadPrior}
		default:
			entry = modeSetter{user: user, digest: digestOf(v, set), prior: was, hadPrior: had && len(was) <= maxPrior}
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(short(k) + "=" + entry.user + ":" + entry.digest)
		if entry.hadPrior {
			b.WriteString(":" + base64.RawURLEncoding.EncodeToString([]byte(entry.prior)))
		}
	}
	return b.String()
}

// ModeSetBy is what ann's kausality.io/modes-by says of the setting ann
// holds for key (its value, or its absence).
func ModeSetBy(ann map[string]string, key string) ModeSetting {
	v, ok := ann[key]
	s, found := parseModeSetters(ann[ModesBy])[short(key)]
	if !found || s.digest != digestOf(v, ok) {
		return ModeSetting{}
	}
	return ModeSetting{User: s.user, Prior: s.prior, HadPrior: s.hadPrior}
}

type modeSetter struct {
	user, digest, prior string
	hadPrior            bool
}

func digestOf(v string, set bool) string {
	if !set {
		return removed
	}
	return Digest([]byte(v))
}

func parseModeSetters(v string) map[string]modeSetter {
	out := map[string]modeSetter{}
	for _, part := range strings.Split(v, ",") {
		k, rest, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		fields := strings.Split(rest, ":")
		if len(fields) < 2 || len(fields) > 3 || fields[0] == "" || fields[1] == "" {
			continue
		}
		s := modeSetter{user: fields[0], digest: fields[1]}
		if len(fields) == 3 {
			prior, err := base64.RawURLEncoding.DecodeString(fields[2])
			if err != nil || len(prior) > maxPrior {
				continue
			}
			s.prior, s.hadPrior = string(prior), true
		}
		out[k] = s
	}
	return out
}

// short is key without the kausality.io/ prefix, as the record names it.
func short(key string) string { return strings.TrimPrefix(key, Prefix) }
