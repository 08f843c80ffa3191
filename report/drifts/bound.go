package drifts

import (
	"encoding/json"
	"maps"
	"slices"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// Bounds of what a record keeps. A record is written with the proxy's own
// credentials for whatever a controller's denied write carried, so its size
// must not depend on that write: a record holds references, the changed
// fields and the trace, never the objects themselves.
const (
	// MaxRecordBytes bounds the data of one record (report and state).
	MaxRecordBytes = 16 << 10
	// maxStringLen bounds any one string taken from the write (names,
	// users, groups, field managers, change paths).
	maxStringLen = 256
	// maxGroups bounds the groups of the writing user kept in a record.
	maxGroups = 16
	// maxTraceHops is how many of the child's last trace hops are kept.
	maxTraceHops = 10
	// maxHopLabels bounds the labels kept per trace hop.
	maxHopLabels = 8
	// maxStateBytes is room kept for the state, which grows with the
	// receivers and the Slack reference after the record is made.
	maxStateBytes = 4 << 10
)

// summarize returns what a record keeps of a Detected report: the
// references, the request, at most desired.MaxChanges changes with
// truncated paths and values, and in place of each object a stub with its
// identity and its last trace hops, so that a receiver and the Slack
// message still show the causal chain. Nothing of a Secret's data is kept.
// The report is shrunk further, trace first, until it encodes within
// MaxRecordBytes less room for the state.
func summarize(r v1alpha1.DriftReport) v1alpha1.DriftReport {
	r.Spec.Changes = boundChanges(r.Spec.Changes)
	oldObject, newObject := notify.ObjectOf(r.Spec.OldObject), notify.ObjectOf(r.Spec.NewObject)
	hops := maxTraceHops
	limit := maxStringLen
	for {
		boundStrings(&r.Spec, limit)
		r.Spec.OldObject = stub(oldObject, hops, limit)
		r.Spec.NewObject = stub(newObject, hops, limit)
		b, err := json.Marshal(r)
		if err == nil && len(b) <= MaxRecordBytes-maxStateBytes {
			return r
		}
		switch {
		case hops > 0:
			hops = 0
		case len(r.Spec.Changes) > 0:
			r.Spec.Changes = r.Spec.Changes[:len(r.Spec.Changes)/2]
		case limit > minStringLen:
			r.Spec.Request.Groups = nil
			limit = minStringLen
		default:
			// encode refuses what still does not fit.
			return r
		}
	}
}

// minStringLen is what is left of each string of a report that does not
// fit otherwise: enough to tell which object and which user.
const minStringLen = 64

func boundChanges(changes []desired.Change) []desired.Change {
	if len(changes) > desired.MaxChanges {
		changes = changes[:desired.MaxChanges]
	}
	out := make([]desired.Change, 0, len(changes))
	for _, c := range changes {
		out = append(out, desired.Change{Path: truncateTo(c.Path, maxStringLen),
			Old: truncateTo(c.Old, maxValueBytes), New: truncateTo(c.New, maxValueBytes)})
	}
	return out
}

// maxValueBytes bounds a rendered value in bytes (desired bounds it in
// characters).
const maxValueBytes = 4 * desired.MaxValueLen

// boundStrings truncates every string of sp taken from the request.
func boundStrings(sp *v1alpha1.DriftReportSpec, limit int) {
	for _, s := range []*string{&sp.Parent.APIVersion, &sp.Parent.Kind, &sp.Parent.Namespace, &sp.Parent.Name, &sp.Parent.UID,
		&sp.Parent.ControllerManager, &sp.Parent.LifecyclePhase, &sp.Child.APIVersion, &sp.Child.Kind, &sp.Child.Namespace,
		&sp.Child.Name, &sp.Child.UID, &sp.Request.User, &sp.Request.UID, &sp.Request.FieldManager, &sp.Request.Operation} {
		*s = truncateTo(*s, limit)
	}
	if a := sp.Allowances; a != nil {
		// A copy: the violations belong to the report being summarized.
		vs := make([]v1alpha1.AllowanceViolation, len(a.Violations))
		for i, v := range a.Violations {
			vs[i] = v1alpha1.AllowanceViolation{Field: truncateTo(v.Field, limit), NeededKind: truncateTo(v.NeededKind, limit),
				NeededMutation: truncateTo(v.NeededMutation, limit)}
		}
		sp.Allowances = &v1alpha1.AllowanceVerdict{Mode: a.Mode, Violations: vs}
	}
	if len(sp.Request.Groups) > maxGroups {
		sp.Request.Groups = sp.Request.Groups[:maxGroups]
	}
	groups := make([]string, 0, len(sp.Request.Groups))
	for _, g := range sp.Request.Groups {
		groups = append(groups, truncateTo(g, limit))
	}
	if len(groups) > 0 {
		sp.Request.Groups = groups
	}
}

// stub returns the identity of obj and its last hops trace hops; an empty
// extension when there is no object.
func stub(obj *unstructured.Unstructured, hops, limit int) runtime.RawExtension {
	if obj == nil {
		return runtime.RawExtension{}
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(truncateTo(obj.GetAPIVersion(), limit))
	out.SetKind(truncateTo(obj.GetKind(), limit))
	out.SetName(truncateTo(obj.GetName(), limit))
	out.SetNamespace(truncateTo(obj.GetNamespace(), limit))
	out.SetUID(types.UID(truncateTo(string(obj.GetUID()), limit)))
	out.SetGeneration(obj.GetGeneration())
	if t := boundTrace(obj.GetAnnotations()[annotations.Trace], hops, limit); t != "" {
		out.SetAnnotations(map[string]string{annotations.Trace: t})
	}
	b, err := out.MarshalJSON()
	if err != nil {
		return runtime.RawExtension{}
	}
	return runtime.RawExtension{Raw: b}
}

// boundTrace keeps the last hops hops of a trace annotation, each with
// truncated strings and at most maxHopLabels labels. "" when nothing is
// kept or the value is not a trace.
func boundTrace(value string, hops, limit int) string {
	if hops <= 0 || value == "" {
		return ""
	}
	t, err := trace.Parse(value)
	if err != nil || len(t) == 0 {
		return ""
	}
	if len(t) > hops {
		t = t[len(t)-hops:]
	}
	out := make(trace.Trace, 0, len(t))
	for _, h := range t {
		h.APIVersion, h.Kind = truncateTo(h.APIVersion, limit), truncateTo(h.Kind, limit)
		h.Name, h.User = truncateTo(h.Name, limit), truncateTo(h.User, limit)
		var labels map[string]string
		for _, k := range slices.Sorted(maps.Keys(h.Labels)) {
			if len(labels) == maxHopLabels {
				break
			}
			if labels == nil {
				labels = map[string]string{}
			}
			labels[truncateTo(k, minStringLen)] = truncateTo(h.Labels[k], minStringLen)
		}
		h.Labels = labels
		out = append(out, h)
	}
	return out.Encode()
}

// truncateTo cuts s to at most n bytes, at a rune boundary, the cut
// marked by an ellipsis.
func truncateTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + ellipsis
}
