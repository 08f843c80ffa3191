package allowance

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// WrittenPaths are the desired-state paths a merge patch (strategic when
// strategic is set) of an object can change, read from the patch alone,
// so that a write of an object known only by its metadata is checked
// without reading the object. Every field the patch changes is at or
// below one of them: a scalar it sets is named itself; a null removes the
// field with everything below it; a list (replaced by a merge patch,
// merged by key by a strategic one) and a map carrying a strategic
// directive ($patch, $retainKeys, $setElementOrder/..., ...) are named as
// a whole, since what changes inside them depends on what is stored.
// coarse says that some path stands for more than one field. A path may
// name a field set to the value it already has: the paths are a superset,
// so an allowance that covers all of them covers the write, while a path
// no allowance covers is a violation only if the field really changes.
// ok is false when the patch is not a JSON object.
func WrittenPaths(patch []byte, strategic bool) (paths []string, coarse bool, ok bool) {
	var top map[string]any
	if err := json.Unmarshal(patch, &top); err != nil || top == nil {
		return nil, false, false
	}
	w := written{strategic: strategic}
	if strategic && hasDirective(top) {
		// A directive on the whole object replaces or retains its
		// top-level fields: anything may change.
		return nil, false, false
	}
	w.walk(make([]segment, 0, 16), 0, desired.Fields(top))
	sort.Strings(w.paths)
	return w.paths, w.coarse, true
}

type written struct {
	strategic bool
	paths     []string
	coarse    bool
}

func (w *written) walk(at []segment, keyBytes int, v any) {
	if len(at) > 0 && unnameable(at, keyBytes) {
		// No policy names anything below: the path stands for it all.
		w.add(at, true)
		return
	}
	switch v := v.(type) {
	case map[string]any:
		if len(at) > 0 && (len(v) == 0 || w.strategic && hasDirective(v)) {
			// An empty map merges nothing in, but may create the field;
			// a directive makes the whole map change.
			w.add(at, len(v) > 0)
			return
		}
		for k, sub := range v {
			w.walk(append(at, segment{key: k}), keyBytes+len(k), sub)
		}
	case []any:
		w.add(at, true)
	case nil:
		w.add(at, true)
	default:
		w.add(at, false)
	}
}

func (w *written) add(at []segment, coarse bool) {
	if len(at) == 0 {
		return
	}
	w.paths = append(w.paths, render(at))
	w.coarse = w.coarse || coarse
}

// hasDirective reports whether a map of a strategic merge patch carries a
// directive key.
func hasDirective(m map[string]any) bool {
	for k := range m {
		if strings.HasPrefix(k, "$") {
			return true
		}
	}
	return false
}
