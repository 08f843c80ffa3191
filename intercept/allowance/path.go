package allowance

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// A path names a field of an object's desired state: keys joined by dots,
// list indices and keys that are not plain names in brackets, e.g.
// spec.template.spec.containers[0].image or metadata.annotations[jira].
// In a policy, [*] stands for any index.

// segment is one step of a path: a key, an index, or the [*] wildcard.
type segment struct {
	key      string
	index    int
	isIndex  bool
	wildcard bool
}

func (s segment) String() string {
	switch {
	case s.wildcard:
		return "[*]"
	case s.isIndex:
		return "[" + strconv.Itoa(s.index) + "]"
	case plainKey(s.key):
		return "." + s.key
	case strings.ContainsAny(s.key, "[]"):
		// No path can name such a key; rendered as is, it would read
		// back as other segments (spec[replicas].[x] as spec.replicas.x).
		return "[" + strings.Map(func(r rune) rune {
			if r == '[' || r == ']' {
				return '\uFFFD'
			}
			return r
		}, s.key) + "]"
	default:
		return "[" + s.key + "]"
	}
}

// plainKey: a key that can be written after a dot and read back.
func plainKey(k string) bool {
	if k == "" {
		return false
	}
	return strings.IndexFunc(k, func(r rune) bool {
		plain := r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		return !plain
	}) < 0
}

// render writes segments as a path.
func render(segs []segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.String())
	}
	return strings.TrimPrefix(b.String(), ".")
}

// maxPathLength bounds a path in a policy.
const maxPathLength = 512

// parsePath reads a path. Bracketed parts are an index, *, or a key
// (which may contain dots and slashes but no brackets).
func parsePath(p string) ([]segment, error) {
	if p == "" {
		return nil, fmt.Errorf("empty path")
	}
	if len(p) > maxPathLength {
		return nil, fmt.Errorf("path %.40q... is %d bytes long, more than %d", p, len(p), maxPathLength)
	}
	var segs []segment
	for i := 0; i < len(p); {
		switch p[i] {
		case '.':
			if i == 0 || i == len(p)-1 {
				return nil, fmt.Errorf("path %q: a dot must separate two names", p)
			}
			i++
			continue
		case '[':
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("path %q: unclosed [", p)
			}
			inner := p[i+1 : i+end]
			i += end + 1
			switch n, err := strconv.Atoi(inner); {
			case inner == "*":
				segs = append(segs, segment{wildcard: true})
			case inner == "" || strings.ContainsAny(inner, "[]"):
				return nil, fmt.Errorf("path %q: empty or nested brackets", p)
			case err == nil && n >= 0:
				segs = append(segs, segment{index: n, isIndex: true})
			default:
				segs = append(segs, segment{key: inner})
			}
			continue
		case ']':
			return nil, fmt.Errorf("path %q: ] without [", p)
		}
		end := strings.IndexAny(p[i:], ".[]")
		if end < 0 {
			end = len(p) - i
		}
		if i > 0 && p[i-1] != '.' {
			return nil, fmt.Errorf("path %q: a name must follow a dot", p)
		}
		segs = append(segs, segment{key: p[i : i+end]})
		i += end
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("path %q names no field", p)
	}
	return segs, nil
}

// segmentMatches: a pattern's segment matches a concrete one. A bracketed
// key matches the same key written after a dot.
func segmentMatches(pattern, concrete segment) bool {
	switch {
	case pattern.wildcard:
		return concrete.isIndex
	case pattern.isIndex:
		return concrete.isIndex && concrete.index == pattern.index
	default:
		return !concrete.isIndex && !concrete.wildcard && concrete.key == pattern.key
	}
}

// covers: the pattern names the concrete path or a field above it, so a
// mutation of the path is a mutation of what the pattern allows.
func covers(pattern, concrete []segment) bool {
	if len(pattern) > len(concrete) {
		return false
	}
	for i := range pattern {
		if !segmentMatches(pattern[i], concrete[i]) {
			return false
		}
	}
	return true
}

// overlaps: the pattern and the concrete path name the same field, one
// above the other; a change of either changes the other.
func overlaps(pattern, concrete []segment) bool {
	n := min(len(pattern), len(concrete))
	for i := 0; i < n; i++ {
		if !segmentMatches(pattern[i], concrete[i]) {
			return false
		}
	}
	return true
}

// Covers reports whether the policy path pattern (with [*] wildcards)
// names the concrete path or a field above it. Unreadable paths cover
// nothing.
func Covers(pattern, path string) bool {
	p, err := parsePath(pattern)
	if err != nil {
		return false
	}
	c, err := parsePath(path)
	return err == nil && covers(p, c)
}

// ChangedPaths returns the paths of the desired-state fields that differ
// between old and new (either may be nil), with concrete indices, sorted.
// Paths name leaves: a field added or removed with everything below it
// is named by each of its leaves, so that a policy path names what it
// allows however the field came to change. An empty map or list that
// appears or disappears is named itself.
func ChangedPaths(old, new map[string]any) []string {
	var out []string
	diff(make([]segment, 0, 16), 0, desired.Fields(old), desired.Fields(new), &out)
	sort.Strings(out)
	return out
}

// unnameable: no policy path (at most maxPathLength bytes) can name at
// or anything below it, so what changed below it is named by at itself;
// covers and overlaps answer for it as for any path below it.
func unnameable(at []segment, keyBytes int) bool {
	return len(at) > maxPathLength || keyBytes > maxPathLength
}

// diff walks a and b with at as a stack: appends are undone on return,
// so no level copies the path (quadratic in the depth).
func diff(at []segment, keyBytes int, a, b any, out *[]string) {
	if len(at) > 0 && unnameable(at, keyBytes) {
		if !reflect.DeepEqual(a, b) {
			*out = append(*out, render(at))
		}
		return
	}
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	switch {
	case (aIsMap || a == nil) && (bIsMap || b == nil) && (aIsMap || bIsMap):
		if len(am) == 0 && len(bm) == 0 {
			if len(at) > 0 && (a == nil) != (b == nil) {
				*out = append(*out, render(at))
			}
			return
		}
		for k, av := range am {
			bv, ok := bm[k]
			if !ok {
				bv = nil
			}
			diff(append(at, segment{key: k}), keyBytes+len(k), av, bv, out)
		}
		for k, bv := range bm {
			if _, ok := am[k]; !ok {
				diff(append(at, segment{key: k}), keyBytes+len(k), nil, bv, out)
			}
		}
	case (aIsList || a == nil) && (bIsList || b == nil) && (aIsList || bIsList):
		if len(al) == 0 && len(bl) == 0 {
			if (a == nil) != (b == nil) {
				*out = append(*out, render(at))
			}
			return
		}
		for i := 0; i < max(len(al), len(bl)); i++ {
			var av, bv any
			if i < len(al) {
				av = al[i]
			}
			if i < len(bl) {
				bv = bl[i]
			}
			diff(append(at, segment{index: i, isIndex: true}), keyBytes, av, bv, out)
		}
	default:
		if !scalarEqual(a, b) && len(at) > 0 {
			*out = append(*out, render(at))
		}
	}
}

// scalarEqual compares leaves as desired state does; two nulls are equal.
func scalarEqual(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return desired.EqualScalar(a, b)
}

// lookup returns the value at a concrete path of obj, rendered as text:
// strings as they are, anything else as JSON. ok is false when the path
// names nothing.
func lookup(obj map[string]any, segs []segment) (string, bool) {
	var cur any = obj
	for _, s := range segs {
		switch {
		case s.isIndex:
			l, ok := cur.([]any)
			if !ok || s.index >= len(l) {
				return "", false
			}
			cur = l[s.index]
		case s.wildcard:
			return "", false
		default:
			m, ok := cur.(map[string]any)
			if !ok {
				return "", false
			}
			if cur, ok = m[s.key]; !ok {
				return "", false
			}
		}
	}
	if s, ok := cur.(string); ok {
		return s, true
	}
	b, err := json.Marshal(cur)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// LeftOut reports whether path names a field old holds and new does not:
// a write that leaves it out, which kube-apiserver may fill in again with
// its default.
func LeftOut(old, new map[string]any, path string) bool {
	segs, err := parsePath(path)
	if err != nil {
		return false
	}
	_, inOld := lookup(old, segs)
	_, inNew := lookup(new, segs)
	return inOld && !inNew
}
