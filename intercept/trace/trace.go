// Package trace builds the kausality.io/trace annotation: a compact JSON
// array of hops recording the causal chain of an object.
//
//	[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":5,"user":"alice","timestamp":"2026-01-24T10:30:00Z"},
//	 {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9","generation":1,"user":"system:serviceaccount:kube-system:deployment-controller","timestamp":"2026-01-24T10:30:01Z","labels":{"ticket":"JIRA-1"}}]
//
// An origin starts a new one-hop trace. A controller hop copies the parent's
// trace and appends itself. Labels come from the kausality.io/trace-*
// annotations of the hop's own object; they are not inherited.
//
// Encoding is hand-written (no reflection) because it runs on every
// intercepted write; extending splices the parent's (compacted) JSON instead
// of decoding and re-encoding it.
package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// Hop is one entry of the trace.
type Hop struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Name       string            `json:"name"`
	Generation int64             `json:"generation"`
	User       string            `json:"user"`
	Timestamp  time.Time         `json:"timestamp"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// Trace is the decoded annotation.
type Trace []Hop

// Parse decodes a trace annotation value. Empty is an empty trace.
func Parse(s string) (Trace, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var t Trace
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return nil, err
	}
	return t, nil
}

// Encode renders the trace as compact JSON ("[]" when empty).
func (t Trace) Encode() string {
	buf := make([]byte, 0, 160*len(t)+2)
	buf = append(buf, '[')
	for i := range t {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = AppendHop(buf, &t[i])
	}
	buf = append(buf, ']')
	return string(buf)
}

// Labels returns the hop labels of an object: its kausality.io/trace-<x>
// annotations as labels[x]. Nil when there are none.
func Labels(objAnnotations map[string]string) map[string]string {
	var labels map[string]string
	for k, v := range objAnnotations {
		if l := annotations.TraceLabel(k); l != "" {
			if labels == nil {
				labels = make(map[string]string, 2)
			}
			labels[l] = v
		}
	}
	return labels
}

// Origin returns the annotation value of a new trace that starts at hop.
func Origin(hop *Hop) string {
	buf := make([]byte, 0, 192)
	buf = append(buf, '[')
	buf = AppendHop(buf, hop)
	buf = append(buf, ']')
	return string(buf)
}

// ErrMalformed is returned (wrapped) by Extend when the parent trace is not
// a JSON array of objects.
var ErrMalformed = errors.New("malformed trace")

// Extend returns the parent's trace with hop appended. The parent's hops
// are kept verbatim (compacted). An empty parent trace yields [hop]. A
// malformed parent trace yields [hop] and an error wrapping ErrMalformed, so
// the caller can warn.
func Extend(parentTrace string, hop *Hop) (string, error) {
	p := strings.TrimSpace(parentTrace)
	if p == "" || p == "[]" {
		return Origin(hop), nil
	}
	buf := make([]byte, 0, len(p)+192)
	var err error
	if isCompact(p) {
		buf = append(buf, p...)
	} else {
		cb := bytes.NewBuffer(buf)
		if err = json.Compact(cb, []byte(p)); err == nil {
			buf = cb.Bytes()
		}
	}
	if err == nil {
		err = checkArrayOfObjects(buf)
	}
	if err != nil {
		return Origin(hop), fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(buf) == 2 { // "[]"
		return Origin(hop), nil
	}
	buf = keepLast(buf, MaxHops-1)
	buf = buf[:len(buf)-1]
	buf = append(buf, ',')
	buf = AppendHop(buf, hop)
	buf = append(buf, ']')
	return string(buf), nil
}

// MaxHops bounds a trace: ownerReferences may form a cycle (an object
// that owns itself, two that own each other), and every write around it
// would otherwise add a hop. The oldest hops give way first.
const MaxHops = 64

// keepLast returns b, a valid compact JSON array of objects, with only its
// last n elements.
func keepLast(b []byte, n int) []byte {
	var starts []int
	depth := 0
	var str jsonStrings
	for i := 1; i < len(b)-1; i++ {
		c := b[i]
		if str.inString(c) {
			continue
		}
		switch c {
		case '{', '[':
			if depth == 0 {
				starts = append(starts, i)
			}
			depth++
		case '}', ']':
			depth--
		}
	}
	if len(starts) <= n {
		return b
	}
	out := make([]byte, 0, len(b)-starts[len(starts)-n]+1)
	out = append(out, '[')
	return append(out, b[starts[len(starts)-n]:]...)
}

// isCompact reports whether s has no whitespace outside strings (then it
// need not be compacted; it is still validated).
func isCompact(s string) bool {
	var str jsonStrings
	for i := 0; i < len(s); i++ {
		if str.inString(s[i]) {
			continue
		}
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			return false
		}
	}
	return true
}

// jsonStrings follows a JSON text byte by byte and tells string contents
// (quotes included) from structure.
type jsonStrings struct{ in, esc bool }

// inString reports whether c, the next byte, belongs to a string.
func (j *jsonStrings) inString(c byte) bool {
	if j.in {
		switch {
		case j.esc:
			j.esc = false
		case c == '\\':
			j.esc = true
		case c == '"':
			j.in = false
		}
		return true
	}
	if c == '"' {
		j.in = true
		return true
	}
	return false
}

// checkArrayOfObjects validates that b is JSON and a (possibly empty) array
// whose elements are all objects.
func checkArrayOfObjects(b []byte) error {
	if !json.Valid(b) {
		return errors.New("invalid JSON")
	}
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return errors.New("not a JSON array")
	}
	depth := 0
	var str jsonStrings
	expectElem := true
	for i := 1; i < len(b)-1; i++ {
		c := b[i]
		if depth == 0 && expectElem {
			if c != '{' {
				return errors.New("trace element is not an object")
			}
			expectElem = false
		}
		if str.inString(c) {
			continue
		}
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				expectElem = true
			}
		}
	}
	return nil
}

// AppendHop appends the compact JSON encoding of hop to dst. Field order and
// names match the reference; labels are sorted by key; the timestamp is RFC
// 3339 in UTC with second precision.
func AppendHop(dst []byte, h *Hop) []byte {
	dst = append(dst, `{"apiVersion":`...)
	dst = appendString(dst, h.APIVersion)
	dst = append(dst, `,"kind":`...)
	dst = appendString(dst, h.Kind)
	dst = append(dst, `,"name":`...)
	dst = appendString(dst, h.Name)
	dst = append(dst, `,"generation":`...)
	dst = strconv.AppendInt(dst, h.Generation, 10)
	dst = append(dst, `,"user":`...)
	dst = appendString(dst, h.User)
	dst = append(dst, `,"timestamp":"`...)
	dst = h.Timestamp.UTC().Truncate(time.Second).AppendFormat(dst, time.RFC3339)
	dst = append(dst, '"')
	if len(h.Labels) > 0 {
		dst = append(dst, `,"labels":{`...)
		var keysArr [8]string
		keys := keysArr[:0]
		for k := range h.Labels {
			keys = append(keys, k)
		}
		if len(keys) > 1 {
			sort.Strings(keys)
		}
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendString(dst, h.Labels[k])
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping like encoding/json
// (without HTML escaping). Invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
