// Package desired decides what part of an object is its desired state and
// which desired-state fields a write changes.
//
// The desired state of an object is its .spec when it has one (in the old or
// the new version). Objects without a spec (ConfigMap data/binaryData, Secret
// data/stringData/type, RBAC rules/subjects/roleRef/aggregationRule,
// ServiceAccount secrets, StorageClass parameters, webhook configurations,
// ...) have everything outside apiVersion, kind, metadata and status as their
// desired state. Metadata-only and status-only writes therefore never count
// as changes.
//
// Comparison is semantic in the ways the apiserver's storage is: absent, null,
// {} and [] are the same (the apiserver serializes an absent map or list as
// absent and an absent non-pointer struct as {}); numbers compare by value
// (3 == 3.0); lists of objects that carry a unique key (name, mountPath,
// containerPort, ...) are compared element by element by that key.
//
// What it cannot see: the apiserver defaults fields after decoding. A writer
// that omits a defaulted field (a controller that builds the spec from
// scratch instead of modifying the object it read) appears to remove that
// field, though after defaulting nothing changes. Compare against a
// server-side dry-run result when that matters.
package desired

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	// MaxChanges bounds Result.Changes; Result.Total counts all changes.
	MaxChanges = 20
	// MaxValueLen bounds a rendered value (in characters).
	MaxValueLen = 64
	// Unset renders an absent (or null or empty) value.
	Unset = "<unset>"
	// Redacted renders a Secret value.
	Redacted = "<redacted>"
)

// HoldsDesiredState reports whether a top-level field of an object can hold
// its desired state: any field but its type (apiVersion, kind), its metadata
// and its status.
func HoldsDesiredState(topLevelField string) bool {
	switch topLevelField {
	case "apiVersion", "kind", "metadata", "status":
		return false
	}
	return true
}

// Change is one changed field of the desired state. It is the DriftReport's
// wire type, so that the diff reaches webhook receivers unconverted.
type Change = v1alpha1.Change

// Result is the outcome of Diff.
type Result struct {
	// Changed is whether the write changes the desired state.
	Changed bool
	// Changes are the first MaxChanges changed fields, in a deterministic
	// order (depth first, map keys sorted, list elements in order).
	Changes []Change
	// Total is the number of changed fields found, >= len(Changes).
	Total int
}

// Changed reports whether a write from old to new changes the desired state
// and the first MaxChanges changed fields (Diff also gives the total). old is
// nil for a create: it counts as changed when the desired state is non-empty.
// new is nil for a delete, which always counts as changed.
func Changed(old, new *unstructured.Unstructured) (bool, []Change) {
	r := Diff(old, new)
	return r.Changed, r.Changes
}

// Diff compares the desired state of old and new; see Changed.
func Diff(old, new *unstructured.Unstructured) Result {
	if old == nil && new == nil {
		return Result{}
	}
	d := differ{redact: isSecret(old) || isSecret(new)}
	// The spec alone only when both sides have one: a "spec" member sent
	// for a kind that has none (kube-apiserver drops it) must not hide a
	// change of its data.
	useSpec := (old == nil || hasSpec(old)) && (new == nil || hasSpec(new))
	d.walk(nil, State(old, useSpec), State(new, useSpec))
	r := Result{Changes: d.changes, Total: d.total, Changed: d.total > 0}
	if new == nil && old != nil {
		r.Changed = true // a delete always counts
	}
	return r
}

func hasSpec(obj *unstructured.Unstructured) bool {
	if obj == nil {
		return false
	}
	_, ok := obj.Object["spec"]
	return ok
}

// State returns the desired state of obj as a map of top-level fields:
// {"spec": ...} when spec is true, else every top-level field but apiVersion,
// kind, metadata and status. The values are not copied. obj may be nil.
func State(obj *unstructured.Unstructured, spec bool) map[string]interface{} {
	if obj == nil {
		return nil
	}
	if spec {
		if v, ok := obj.Object["spec"]; ok {
			return map[string]interface{}{"spec": v}
		}
		return nil
	}
	return Fields(obj.Object)
}

// Fields returns every top-level field of obj but apiVersion, kind,
// metadata and status: what a write changes when it changes what the
// object should be (spec, or data and rules for spec-less kinds). The
// values are not copied. obj may be nil.
func Fields(obj map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(obj))
	for k, v := range obj {
		if HoldsDesiredState(k) {
			out[k] = v
		}
	}
	return out
}

func isSecret(obj *unstructured.Unstructured) bool {
	if obj == nil {
		return false
	}
	return obj.GetKind() == "Secret" && obj.GetAPIVersion() == "v1"
}

type differ struct {
	redact  bool
	changes []Change
	total   int
}

// fieldPath is a path as a chain of segments, rendered only for the few
// changes that are reported. Building a string at every level would cost
// O(depth²) on deeply nested objects, which any writer can send.
type fieldPath struct {
	parent  *fieldPath
	segment string // ".key", `["key"]`, "[3]" or "[name=x]"; the top-level key bare
	top     string // the top-level field this path is under
}

// isSelector reports whether p ends in a label selector field: selector,
// or a field named ...Selector.
func (p *fieldPath) isSelector() bool {
	if p == nil {
		return false
	}
	key := strings.TrimPrefix(p.segment, ".")
	return key == "selector" || strings.HasSuffix(key, "Selector")
}

func (p *fieldPath) child(segment string) *fieldPath {
	top := ""
	if p != nil {
		top = p.top
	} else {
		top = strings.TrimPrefix(segment, ".")
	}
	return &fieldPath{parent: p, segment: segment, top: top}
}

func (p *fieldPath) String() string {
	var segments []string
	for q := p; q != nil; q = q.parent {
		segments = append(segments, q.segment)
	}
	var b strings.Builder
	for i := len(segments) - 1; i >= 0; i-- {
		seg := segments[i]
		if i == len(segments)-1 {
			seg = strings.TrimPrefix(seg, ".")
		}
		b.WriteString(seg)
	}
	return b.String()
}

func (d *differ) add(path *fieldPath, old, new interface{}) {
	d.addSuffix(path, "", old, new)
}

func (d *differ) addSuffix(path *fieldPath, suffix string, old, new interface{}) {
	d.total++
	if len(d.changes) >= MaxChanges {
		return
	}
	d.changes = append(d.changes, Change{Path: path.String() + suffix, Old: d.render(path, old), New: d.render(path, new)})
}

func (d *differ) render(path *fieldPath, v interface{}) string {
	if isEmpty(v) {
		return Unset
	}
	if d.redact && path != nil && (path.top == "data" || path.top == "stringData") {
		return Redacted
	}
	return Render(v)
}

// Render renders a value as compact JSON, truncated to MaxValueLen
// characters ("…" marks a cut). It stops rendering soon after the limit, so
// a change high up in a large object costs little.
func Render(v interface{}) string {
	var b strings.Builder
	renderJSON(&b, v, 4*MaxValueLen)
	return truncate(b.String(), MaxValueLen)
}

// renderJSON writes v as compact JSON with sorted keys, as json.Marshal
// does, until b holds more than budget bytes.
func renderJSON(b *strings.Builder, v interface{}, budget int) {
	if b.Len() > budget {
		return
	}
	switch v := v.(type) {
	case map[string]interface{}:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		renderElements(b, '{', '}', len(keys), budget, func(i int) {
			renderJSON(b, keys[i], budget)
			b.WriteByte(':')
			renderJSON(b, v[keys[i]], budget)
		})
	case []interface{}:
		renderElements(b, '[', ']', len(v), budget, func(i int) {
			renderJSON(b, v[i], budget)
		})
	case string:
		if len(v) > budget {
			v = v[:budget]
		}
		writeJSONString(b, v)
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	default:
		out, err := json.Marshal(v)
		if err != nil {
			fmt.Fprintf(b, "%v", v)
			return
		}
		b.Write(out)
	}
}

// renderElements writes n comma-separated elements between opening and
// closing. Past the budget it stops without the closing byte: the result is
// cut there anyway.
func renderElements(b *strings.Builder, opening, closing byte, n, budget int, element func(i int)) {
	b.WriteByte(opening)
	for i := 0; i < n; i++ {
		if b.Len() > budget {
			return
		}
		if i > 0 {
			b.WriteByte(',')
		}
		element(i)
	}
	b.WriteByte(closing)
}

// writeJSONString writes s as json.Marshal does. Most keys and values a
// write changes are plain ASCII, which need no escaping and so no trip
// through the encoder and its allocations.
func writeJSONString(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			out, _ := json.Marshal(s)
			b.Write(out)
			return
		}
	}
	b.WriteByte('"')
	b.WriteString(s)
	b.WriteByte('"')
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n-1 {
			return s[:pos] + "…"
		}
		i++
	}
	return s
}

// walk compares a and b at path; a nil path is the map of top-level desired
// fields.
func (d *differ) walk(path *fieldPath, a, b interface{}) {
	aEmpty, bEmpty := isEmpty(a), isEmpty(b)
	if aEmpty && bEmpty {
		if (a == nil) != (b == nil) && path.isSelector() {
			// A label selector that is absent selects nothing (a
			// PodDisruptionBudget's) or is not applied, and one that is
			// empty selects everything (a NetworkPolicy peer's or an
			// affinity term's namespaceSelector).
			d.add(path, a, b)
		}
		return
	}
	am, aIsMap := a.(map[string]interface{})
	bm, bIsMap := b.(map[string]interface{})
	if aIsMap && bIsMap && sameMap(am, bm) {
		return // a merge patch's result shares what it left alone
	}
	if (aIsMap || aEmpty) && (bIsMap || bEmpty) {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			d.walk(path.child(keySegment(k)), am[k], bm[k])
		}
		return
	}
	al, aIsList := a.([]interface{})
	bl, bIsList := b.([]interface{})
	if aIsList && bIsList {
		if len(al) == len(bl) && len(al) > 0 && &al[0] == &bl[0] {
			return
		}
		d.walkList(path, al, bl)
		return
	}
	if !EqualScalar(a, b) {
		d.add(path, a, b)
	}
}

// sameMap reports whether a and b are one map, which differs from itself
// nowhere.
func sameMap(a, b map[string]interface{}) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func (d *differ) walkList(path *fieldPath, a, b []interface{}) {
	if key := listKey(a, b); key != "" {
		d.walkKeyedList(path, key, a, b)
		return
	}
	if len(a) != len(b) {
		d.add(path, a, b)
		return
	}
	for i := range a {
		d.walk(path.child("["+strconv.Itoa(i)+"]"), a[i], b[i])
	}
}

// listKeys are tried in order to match list elements; the first that is a
// scalar present and unique in every element of both lists wins.
var listKeys = []string{"name", "mountPath", "devicePath", "containerPort", "port", "ip", "key", "topologyKey"}

func listKey(a, b []interface{}) string {
	if len(a) == 0 && len(b) == 0 {
		return ""
	}
next:
	for _, key := range listKeys {
		for _, l := range [][]interface{}{a, b} {
			seen := make(map[string]bool, len(l))
			for _, e := range l {
				m, ok := e.(map[string]interface{})
				if !ok {
					return ""
				}
				id, ok := scalarID(m[key])
				if !ok || seen[id] {
					continue next
				}
				seen[id] = true
			}
		}
		return key
	}
	return ""
}

func scalarID(v interface{}) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case int64, int, int32, float64, bool:
		return fmt.Sprint(v), true
	}
	return "", false
}

func (d *differ) walkKeyedList(path *fieldPath, key string, a, b []interface{}) {
	type entry struct {
		id string
		v  interface{}
	}
	index := func(l []interface{}) ([]entry, map[string]interface{}) {
		es := make([]entry, len(l))
		m := make(map[string]interface{}, len(l))
		for i, e := range l {
			id, _ := scalarID(e.(map[string]interface{})[key])
			es[i] = entry{id, e}
			m[id] = e
		}
		return es, m
	}
	ae, am := index(a)
	be, bm := index(b)
	elem := func(id string) *fieldPath { return path.child("[" + key + "=" + id + "]") }

	// Order: a reordering of the common elements is a change of the list.
	var aOrder, bOrder []string
	for _, e := range ae {
		if _, ok := bm[e.id]; ok {
			aOrder = append(aOrder, e.id)
		}
	}
	for _, e := range be {
		if _, ok := am[e.id]; ok {
			bOrder = append(bOrder, e.id)
		}
	}
	if !slices.Equal(aOrder, bOrder) {
		d.addSuffix(path, " (order of "+key+")", aOrder, bOrder)
	}
	for _, e := range be {
		d.walkElement(elem(e.id), am[e.id], e.v)
	}
	for _, e := range ae {
		if _, ok := bm[e.id]; !ok {
			d.walkElement(elem(e.id), e.v, nil)
		}
	}
}

// walkElement reports an added or removed list element as one change, and
// recurses into elements present on both sides.
func (d *differ) walkElement(path *fieldPath, a, b interface{}) {
	if a == nil || b == nil {
		d.add(path, a, b)
		return
	}
	d.walk(path, a, b)
}

func isEmpty(v interface{}) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]interface{}:
		return len(v) == 0
	case []interface{}:
		return len(v) == 0
	}
	return false
}

// EqualScalar compares two decoded JSON leaves: numbers by value whatever
// their Go type (decoding gives int64 or float64), strings and booleans as
// themselves; anything else, or leaves of different kinds, differ.
func EqualScalar(a, b interface{}) bool {
	// Integers exactly: beyond 2^53 two of them share a float64.
	if ai, ok := integer(a); ok {
		if bi, ok := integer(b); ok {
			return ai == bi
		}
	}
	if af, ok := number(a); ok {
		bf, ok := number(b)
		return ok && af == bf
	}
	switch a := a.(type) {
	case string:
		b, ok := b.(string)
		return ok && a == b
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	}
	// Mismatched kinds (map vs scalar, list vs map, ...).
	return false
}

func integer(v interface{}) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	}
	return 0, false
}

func number(v interface{}) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, !math.IsNaN(n)
	case float32:
		return float64(n), true
	}
	return 0, false
}

// keySegment is the path segment of a map key: ".key" for identifier-like
// keys, `["key"]` otherwise (dots, slashes, ... as in labels and data keys).
func keySegment(key string) string {
	if isIdentifier(key) {
		return "." + key
	}
	b, _ := json.Marshal(key)
	return "[" + string(b) + "]"
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case i > 0 && (r >= '0' && r <= '9' || r == '-'):
		default:
			return false
		}
	}
	return true
}
