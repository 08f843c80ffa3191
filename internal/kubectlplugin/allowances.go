package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// SettlednessLookup is what the plugin could read of the proxy's
// settledness records: the record of one object, or why there is none.
type SettlednessLookup struct {
	// Record of the object; nil when there is none or it could not be read.
	Record *settle.Record
	// Source names where records are read (the ConfigMap).
	Source string
	// Error says why the records could not be read; "" when they could
	// (a missing record then means the proxy never saw the object settle).
	Error string
}

// AllowanceFacts is what `allowances` read from the cluster.
type AllowanceFacts struct {
	Object *unstructured.Unstructured
	// NamespaceAnnotations of the object's namespace (its allowance mode);
	// NamespaceUnknown when it could not be read.
	NamespaceAnnotations map[string]string
	NamespaceUnknown     bool
	// Settledness looks up the proxy's settledness record of an object.
	Settledness func(obj *unstructured.Unstructured) SettlednessLookup
	// Children are the objects whose controller is Object, of the kinds
	// its allowances or policies speak of.
	Children []*unstructured.Unstructured
	// ChildrenErrors say which kinds of children could not be listed.
	ChildrenErrors []string
}

// AllowancesReport is the output of `allowances`.
type AllowancesReport struct {
	Object     decision.ObjectRef  `json:"object"`
	Generation int64               `json:"generation"`
	Mode       AllowanceModeView   `json:"mode"`
	Settled    SettledView         `json:"settled"`
	Allowances []AllowanceView     `json:"allowances"`
	Unknown    []json.RawMessage   `json:"unknown,omitempty"`
	Error      string              `json:"error,omitempty"`
	Children   []ChildAllowanceSet `json:"children,omitempty"`
	Errors     []string            `json:"errors,omitempty"`
}

// AllowanceModeView is the allowance mode of an object and where it comes
// from, as the proxy reads it.
type AllowanceModeView struct {
	Mode   allowance.Mode `json:"mode"`
	Source string         `json:"source"`
	// Warning: the value is not one the proxy knows.
	Warning string `json:"warning,omitempty"`
}

// String is the mode and its source as the tables show them, off named
// rather than left blank.
func (m AllowanceModeView) String() string {
	mode := string(m.Mode)
	if m.Mode == allowance.ModeOff {
		mode = "off"
	}
	return mode + " (" + m.Source + ")"
}

// SettledView is the latest generation at which the proxy judges the
// object settled, which consumes its allowances up to that generation.
type SettledView struct {
	Generation int64 `json:"generation"`
	// Known is false when the plugin cannot tell what the proxy knows:
	// consumption is then unknown.
	Known  bool   `json:"known"`
	Reason string `json:"reason"`
}

// AllowanceView is one allowance and whether it is used up.
type AllowanceView struct {
	allowance.Allowance
	// Consumed is yes, no or unknown.
	Consumed string `json:"consumed"`
}

// ChildAllowanceSet is a child's allowances that came from the object: a
// hop of their trace is the object.
type ChildAllowanceSet struct {
	Child      decision.ObjectRef `json:"child"`
	Settled    SettledView        `json:"settled"`
	Allowances []AllowanceView    `json:"allowances,omitempty"`
	Error      string             `json:"error,omitempty"`
}

// ExplainAllowances builds the report of f. An annotation that does not
// parse is an error line naming the object and the annotation; the rest is
// still reported.
func ExplainAllowances(f AllowanceFacts) AllowancesReport {
	obj := f.Object
	r := AllowancesReport{Object: decision.RefOf(obj), Generation: obj.GetGeneration(), Allowances: []AllowanceView{},
		Mode: allowanceModeView(obj, "the object", f.NamespaceAnnotations, f.NamespaceUnknown)}
	r.Settled = settledView(obj, lookup(f, obj))
	set, err := allowance.Parse(obj.GetAnnotations()[allowance.Annotation])
	if err != nil {
		r.Error = r.Object.String() + ": " + err.Error()
	}
	r.Allowances = allowanceViews(set.Allowances, r.Settled)
	r.Unknown = set.Unknown
	for _, child := range sortedObjects(f.Children) {
		cs := ChildAllowanceSet{Child: decision.RefOf(child)}
		set, err := allowance.Parse(child.GetAnnotations()[allowance.Annotation])
		if err != nil {
			cs.Error = cs.Child.String() + ": " + err.Error()
		}
		var from []allowance.Allowance
		for _, a := range set.Allowances {
			if cameFrom(a, obj) {
				from = append(from, a)
			}
		}
		if len(from) == 0 && cs.Error == "" {
			continue
		}
		cs.Settled = settledView(child, lookup(f, child))
		cs.Allowances = allowanceViews(from, cs.Settled)
		r.Children = append(r.Children, cs)
	}
	r.Errors = append(r.Errors, f.ChildrenErrors...)
	return r
}

func lookup(f AllowanceFacts, obj *unstructured.Unstructured) SettlednessLookup {
	if f.Settledness == nil {
		return SettlednessLookup{Error: "not read"}
	}
	return f.Settledness(obj)
}

// cameFrom: obj is a hop of the allowance's trace before its last, so
// the allowance passes on a change obj started or carried.
func cameFrom(a allowance.Allowance, obj *unstructured.Unstructured) bool {
	for _, h := range a.Trace {
		if h.Kind == obj.GetKind() && h.Name == obj.GetName() {
			return true
		}
	}
	return false
}

func sortedObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := append([]*unstructured.Unstructured(nil), objs...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.GetKind() != b.GetKind() {
			return a.GetKind() < b.GetKind()
		}
		return a.GetName() < b.GetName()
	})
	return out
}

func allowanceViews(as []allowance.Allowance, s SettledView) []AllowanceView {
	out := make([]AllowanceView, 0, len(as))
	for _, a := range as {
		v := AllowanceView{Allowance: a, Consumed: "unknown"}
		if s.Known {
			v.Consumed = "no"
			if allowance.Consumed(a, s.Generation) {
				v.Consumed = "yes"
			}
		}
		out = append(out, v)
	}
	return out
}

// allowanceModeView reads the mode as allowance.ModeOf does, saying which
// annotation it came from.
func allowanceModeView(obj *unstructured.Unstructured, what string, namespace map[string]string, namespaceUnknown bool) AllowanceModeView {
	return allowanceModeViewOf(obj.GetAnnotations(), obj.GetNamespace(), what, namespace, namespaceUnknown)
}

// allowanceModeViewOf is allowanceModeView on the annotations stored of
// an object in objectNamespace.
func allowanceModeViewOf(stored map[string]string, objectNamespace, what string, namespace map[string]string, namespaceUnknown bool) AllowanceModeView {
	mode, warn := allowance.ModeOf(stored, namespace)
	v := AllowanceModeView{Mode: mode}
	if warn != nil {
		v.Warning = warn.String()
	}
	switch {
	case strings.TrimSpace(stored[annotations.AllowanceMode]) != "":
		v.Source = "annotation " + annotations.AllowanceMode + " on " + what
	case strings.TrimSpace(namespace[annotations.AllowanceMode]) != "":
		v.Source = "annotation " + annotations.AllowanceMode + " on namespace " + objectNamespace
	case namespaceUnknown:
		v.Source = "no " + annotations.AllowanceMode + " on " + what + "; the namespace could not be read, its mode is unknown"
	default:
		v.Source = "no " + annotations.AllowanceMode + " on " + what + " or its namespace: allowances are neither granted nor checked"
	}
	return v
}

// settledView is the latest generation at which the proxy judges obj
// settled, as decision.SettledGeneration computes it: its own generation
// when it has settled at its current spec (now, or by the record of the
// spec it last settled at), else the record's.
func settledView(obj *unstructured.Unstructured, l SettlednessLookup) SettledView {
	current, why := settle.Current(obj)
	gen := obj.GetGeneration()
	switch {
	case current:
		return SettledView{Generation: gen, Known: true, Reason: "settled at its current spec now (" + why + ")"}
	case l.Record != nil && l.Record.Settled == settle.SpecHash(obj) && !l.Record.Moved():
		return SettledView{Generation: gen, Known: true, Reason: "has not changed its spec since it last settled (settledness record in " + l.Source + "); now " + why}
	case l.Record != nil && l.Record.SettledAt > 0:
		return SettledView{Generation: l.Record.SettledAt, Known: true,
			Reason: "last settled at generation " + strconv.FormatInt(l.Record.SettledAt, 10) + " (settledness record in " + l.Source + "); now " + why}
	case l.Error == "":
		return SettledView{Known: true, Reason: "never seen settled (no settledness record in " + l.Source + "); now " + why}
	}
	return SettledView{Reason: "unknown: not settled now (" + why + ") and the proxy's settledness record could not be read (" + l.Error + ")"}
}

// RenderAllowances writes the report as tables.
func RenderAllowances(w io.Writer, r AllowancesReport) {
	p := &printer{w: w}
	p.line("Object:      %s (generation %d)", r.Object, r.Generation)
	p.line("Mode:        %s", r.Mode)
	if r.Mode.Warning != "" {
		p.line("Warning: %s", r.Mode.Warning)
	}
	p.line("Settled:     %s", settledText(r.Settled))
	if len(r.Allowances) == 0 {
		p.line("Allowances:  none in %s", allowance.Annotation)
	} else {
		p.line("Allowances:  %s", allowance.Annotation)
		allowanceTable(w, "  ", r.Allowances)
	}
	for _, u := range r.Unknown {
		p.line("  kept, not understood by this version (justifies nothing): %s", u)
	}
	if len(r.Children) == 0 {
		p.line("Children:    no child carries allowances that came from %s %s", r.Object.Kind, r.Object.Name)
	} else {
		p.line("Children's allowances that came from %s %s:", r.Object.Kind, r.Object.Name)
	}
	for _, c := range r.Children {
		p.line("  %s, settled %s", c.Child, settledText(c.Settled))
		if len(c.Allowances) > 0 {
			allowanceTable(w, "    ", c.Allowances)
		}
		if c.Error != "" {
			p.line("    Error: %s", c.Error)
		}
	}
	if r.Error != "" {
		p.line("Error: %s", r.Error)
	}
	for _, e := range r.Errors {
		p.line("Error: %s", e)
	}
}

func settledText(s SettledView) string {
	if !s.Known {
		return s.Reason
	}
	if s.Generation == 0 {
		return "never: " + s.Reason
	}
	return "at generation " + strconv.FormatInt(s.Generation, 10) + ": " + s.Reason
}

func allowanceTable(w io.Writer, indent string, as []AllowanceView) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%sKIND\tMUTATION\tGENERATION\tCONSUMED\tINITIATOR\tPOLICY\tTRACE\n", indent)
	for _, a := range as {
		fmt.Fprint(tw, indent+printf("%s\t%s\t%d\t%s\t%s\t%s\t%s\n", a.Kind, a.Mutation, a.Generation, a.Consumed,
			orNone(a.Initiator), a.Policy, allowanceTrace(a.Trace)))
	}
	_ = tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// allowanceTrace renders the hops origin first: each with the field that
// led on and the attestations captured from it.
func allowanceTrace(hops []allowance.Hop) string {
	parts := make([]string, len(hops))
	for i, h := range hops {
		s := h.Kind + " " + h.Name + " (generation " + strconv.FormatInt(h.Generation, 10) + ") " + h.Field
		if len(h.Attestations) > 0 {
			keys := make([]string, 0, len(h.Attestations))
			for k := range h.Attestations {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for j, k := range keys {
				keys[j] = k + "=" + h.Attestations[k]
			}
			s += " [" + strings.Join(keys, ", ") + "]"
		}
		parts[i] = s
	}
	return strings.Join(parts, " -> ")
}
