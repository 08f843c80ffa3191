package allowance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// Annotation holds an object's allowances: a JSON array of Allowance. Only
// the proxy writes it: it is one of the system annotations.
const Annotation = annotations.Allowances

// Bounds of the annotation. kube-apiserver allows 256 KiB for all of an
// object's annotations together; allowances must leave room for the rest.
const (
	MaxAnnotationBytes = 32 * 1024
	MaxEntries         = 128
)

// Hop is one object on the way from the initiator's change to the object
// carrying the allowance. The namespace is left out: it is the carrier's,
// or there is none.
type Hop struct {
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	// Field is the changed field of this object that led on, with
	// concrete indices.
	Field string `json:"field"`
	// Attestations are the values the policy captured from this object.
	Attestations map[string]string `json:"attestations,omitempty"`
}

// Allowance lets the controller of the object carrying it make one
// mutation of its children of one kind.
type Allowance struct {
	// Kind of the children.
	Kind string `json:"kind"`
	// Mutation is a field path of the child's desired state ([*]
	// wildcards, covering everything below it), create, or delete.
	Mutation string `json:"mutation"`
	// Generation of the carrier that the change produced; the allowance
	// is consumed once the carrier has settled at it or later.
	Generation int64 `json:"generation"`
	// Initiator is the user who started the chain.
	Initiator string `json:"initiator"`
	// Policy is the AllowancePolicy that granted the allowance; its
	// subjects are the controllers that may use it.
	Policy string `json:"policy"`
	Trace  []Hop  `json:"trace"`
}

// key orders allowances for the deterministic choice among several that
// justify a mutation: by {kind}/{name}/{field} of each hop of the trace,
// then by generation, policy, mutation and initiator.
func (a Allowance) key() string {
	var b strings.Builder
	for _, h := range a.Trace {
		b.WriteString(h.Kind + "/" + h.Name + "/" + h.Field + "\x00")
	}
	b.WriteString("\x01" + fmt.Sprintf("%020d", a.Generation) + "\x00" + a.Policy + "\x00" + a.Mutation + "\x00" + a.Initiator)
	return b.String()
}

// identity is what makes two allowances the same grant: a newer
// generation of the same grant replaces the older one.
func (a Allowance) identity() string {
	var field string
	if n := len(a.Trace); n > 0 {
		field = a.Trace[0].Kind + "/" + a.Trace[0].Name + "/" + a.Trace[0].Field
	}
	return a.Kind + "\x00" + a.Mutation + "\x00" + a.Policy + "\x00" + a.Initiator + "\x00" + field + "\x00" + strconv.Itoa(len(a.Trace))
}

// understood: the entry has what this version of the proxy needs to use
// it. Other entries (a later version's) are kept as they are.
func (a Allowance) understood() bool {
	return a.Kind != "" && a.Mutation != "" && a.Generation > 0 && a.Policy != "" && len(a.Trace) > 0
}

// Set is the parsed annotation.
type Set struct {
	// Allowances this version understands.
	Allowances []Allowance
	// Unknown entries, kept verbatim so that a rollback or a mixed
	// version of the proxy does not lose them; they justify nothing.
	Unknown []json.RawMessage
}

// ErrTooLarge is returned when allowances would not fit the annotation.
var ErrTooLarge = errors.New("allowances exceed the bounds of " + Annotation)

// Parse reads the annotation's value. An empty value is no allowances.
// Broken JSON is an error naming the annotation, and the caller counts it
// as no allowances: allowances only ever permit, so none is the safe side.
func Parse(value string) (Set, error) {
	var s Set
	if strings.TrimSpace(value) == "" {
		return s, nil
	}
	if len(value) > MaxAnnotationBytes {
		return s, fmt.Errorf("%s is %d bytes long, more than %d: counted as no allowances", Annotation, len(value), MaxAnnotationBytes)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return s, fmt.Errorf("%s is not a JSON array of allowances: %v: counted as no allowances", Annotation, err)
	}
	if len(raw) > MaxEntries {
		return s, fmt.Errorf("%s has %d entries, more than %d: counted as no allowances", Annotation, len(raw), MaxEntries)
	}
	for _, r := range raw {
		var a Allowance
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil || !a.understood() {
			s.Unknown = append(s.Unknown, r)
			continue
		}
		s.Allowances = append(s.Allowances, a)
	}
	return s, nil
}

// String serializes the set: compact JSON, the allowances sorted, unknown
// entries after them in their order. An empty set is "". It fails with
// ErrTooLarge beyond the bounds.
func (s Set) String() (string, error) {
	if len(s.Allowances) == 0 && len(s.Unknown) == 0 {
		return "", nil
	}
	if len(s.Allowances)+len(s.Unknown) > MaxEntries {
		return "", fmt.Errorf("%w: %d entries, more than %d", ErrTooLarge, len(s.Allowances)+len(s.Unknown), MaxEntries)
	}
	sorted := append([]Allowance(nil), s.Allowances...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].key() < sorted[j].key() })
	entries := make([]json.RawMessage, 0, len(sorted)+len(s.Unknown))
	for _, a := range sorted {
		b, err := json.Marshal(a)
		if err != nil {
			return "", err
		}
		entries = append(entries, b)
	}
	entries = append(entries, s.Unknown...)
	b, err := json.Marshal(entries)
	if err != nil {
		return "", err
	}
	if len(b) > MaxAnnotationBytes {
		return "", fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(b), MaxAnnotationBytes)
	}
	return string(b), nil
}

// Add returns the set with the allowances added. An allowance that repeats
// an existing grant (same child kind, mutation, policy, initiator and
// origin) replaces it when its generation is newer, so that repeated
// changes of one field (an autoscaler's) do not pile up.
func (s Set) Add(add ...Allowance) Set {
	out := Set{Allowances: append([]Allowance(nil), s.Allowances...), Unknown: s.Unknown}
	for _, a := range add {
		replaced := false
		for i, have := range out.Allowances {
			if have.identity() == a.identity() {
				if a.Generation >= have.Generation {
					out.Allowances[i] = a
				}
				replaced = true
				break
			}
		}
		if !replaced {
			out.Allowances = append(out.Allowances, a)
		}
	}
	return out
}
