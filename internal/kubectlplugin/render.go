package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
)

// RenderWhy writes the human-readable explanation. The approve hint names
// the child as the user named it (arg), so it can be pasted back.
//
//nolint:funlen // one rendering, line by line, in the order the user reads it
func RenderWhy(w io.Writer, ex Explanation, arg string) {
	p := &printer{w: w}
	p.line("Child:       %s", ex.Child)
	if ex.Parent == nil {
		p.line("Parent:      none")
		p.notes(ex)
		p.traceSection(ex.Trace, ex.TraceError)
		return
	}
	pv := ex.Parent
	gen := "generation " + strconv.FormatInt(pv.Generation, 10)
	if pv.ObservedGenerationSource != "" {
		gen += ", observedGeneration " + strconv.FormatInt(pv.ObservedGeneration, 10) + " from " + pv.ObservedGenerationSource
	}
	p.line("Parent:      %s (%s)", pv.Ref, gen)
	p.line("  phase:     %s (%s)", pv.Phase, pv.PhaseReason)
	settled := "no"
	if pv.Settled {
		settled = "yes"
	}
	p.line("  settled:   %s: %s", settled, pv.SettledReason)

	if c := ex.Controller; c != nil {
		who := c.User
		if who == "" {
			who = "unknown user"
		}
		if c.Method != "" {
			who += " [" + string(c.Method) + "]"
		}
		if !c.Determined {
			who = "not known yet"
		}
		p.line("Controller:  %s", who)
		p.line("  because:   %s", c.Reason)
	}
	if m := ex.Mode; m != nil {
		p.line("Mode:        %s (from %s: %s)", m.Mode, m.Source, m.Detail)
	}
	if u := ex.Ungated; u != nil {
		state := "no"
		if u.Ungated {
			state = "yes"
		}
		p.line("Ungated:     %s: %s (ungatedChildKinds from %s)", state, u.Reason, u.Source)
	}
	p.entries("Approvals:", ex.Approvals)
	p.entries("Rejections:", ex.Rejections)
	if ex.Freeze != nil {
		p.line("Freeze:      %s", ex.Freeze)
	} else {
		p.line("Freeze:      not frozen")
	}
	if s := ex.Snooze; s == nil {
		p.line("Snooze:      not snoozed")
	} else {
		state := "expired"
		if s.Active {
			state = "active"
		}
		extra := ""
		if s.User != "" {
			extra += " by " + s.User
		}
		if s.Message != "" {
			extra += ": " + s.Message
		}
		p.line("Snooze:      until %s (%s, %s)%s; notifications only, decisions are unchanged", s.Until.UTC().Format(time.RFC3339), state, s.Annotation, extra)
	}
	if len(ex.Policies) == 0 {
		p.line("Policies:    none apply to the controller")
	}
	for i, pv := range ex.Policies {
		label := "Policies:   "
		if i > 0 {
			label = "            "
		}
		p.line("%s %s", label, pv.Policy)
		for _, pr := range pv.Problems {
			// CEL's errors point at the expression over several lines.
			p.line("               never matches: %s", strings.Join(strings.Fields(pr.String()), " "))
		}
	}
	if ex.Allowances != nil {
		p.allowanceSection(ex.Allowances)
	}
	p.traceSection(ex.Trace, ex.TraceError)

	if ex.Verdict != nil {
		p.line("A desired-state write of the child by its controller now:")
		p.verdict(ex.Verdict)
		if ex.IfRemembered != nil {
			p.verdict(ex.IfRemembered)
		}
	}
	p.unblock(ex, arg)
	for _, w := range ex.Warnings {
		p.line("Warning: %s", w)
	}
	p.notes(ex)
}

type printer struct{ w io.Writer }

// line writes one line of format; its arguments cannot add lines (printf).
func (p *printer) line(format string, args ...any) { fmt.Fprint(p.w, printf(format, args...)+"\n") }

func (p *printer) entries(title string, list []EntryView) {
	if len(list) == 0 {
		p.line("%-12s none", title)
		return
	}
	p.line("%s", title)
	for _, e := range list {
		p.line("  %s  %s", e.Entry, e.Note)
	}
}

func (p *printer) traceSection(t trace.Trace, err string) {
	switch {
	case err != "":
		p.line("Trace:       malformed: %s", err)
	case len(t) == 0:
		p.line("Trace:       none")
	default:
		p.line("Trace:")
		writeTree(p.w, t, "  ")
	}
}

func (p *printer) verdict(v *Verdict) {
	p.line("  if %s:", v.Assumption)
	p.line("    %s (%s): %s", v.Result, v.Category, v.Reason)
	if v.Approval != nil {
		use := ""
		if v.Consumes {
			use = "; the write uses it up"
		}
		entry, _ := json.Marshal(v.Approval)
		p.line("    approved by %s%s", entry, use)
	}
}

func (p *printer) unblock(ex Explanation, arg string) {
	var vs []*Verdict
	for _, v := range []*Verdict{ex.Verdict, ex.IfRemembered} {
		if v != nil && v.Result == decision.Deny {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return
	}
	p.line("To unblock:")
	ns := ""
	if ex.Child.Namespace != "" {
		ns = " -n " + ex.Child.Namespace
	}
	seen := map[string]bool{}
	for _, v := range vs {
		switch v.Category {
		case decision.DriftUnapproved:
			if !seen["approve"] {
				p.line("  kubectl kausality approve%s %s --mode once", ns, arg)
			}
			seen["approve"] = true
		case decision.DriftRejected:
			if !seen["reject"] {
				p.line("  remove the rejection from %s on %s", annotations.Rejections, ex.Parent.Ref)
			}
			seen["reject"] = true
		case decision.Frozen:
			if !seen["freeze"] {
				p.line("  kubectl kausality unfreeze%s %s", ns, resourceArg(ex.Parent.Ref))
			}
			seen["freeze"] = true
		}
		for _, u := range v.Unblock {
			if !seen[u.Field+u.Action] {
				action := u.Action
				if strings.HasPrefix(action, "[") {
					action = "set it to " + action
				}
				p.line("  or by hand, %s of %s: %s", u.Field, ex.Parent.Ref, action)
			}
			seen[u.Field+u.Action] = true
		}
	}
}

func (p *printer) notes(ex Explanation) {
	for _, n := range ex.Notes {
		p.line("Note: %s", n)
	}
}

// resourceArg renders "deployment.apps/web", which kubectl and the plugin
// both resolve.
func resourceArg(r decision.ObjectRef) string {
	res := strings.ToLower(r.Kind)
	if g, _, ok := strings.Cut(r.APIVersion, "/"); ok {
		res += "." + g
	}
	return res + "/" + r.Name
}

// RenderTrace writes the trace as a tree, origin first.
func RenderTrace(w io.Writer, ref decision.ObjectRef, t trace.Trace) {
	fmt.Fprintf(w, "%s\n", ref)
	if len(t) == 0 {
		fmt.Fprintln(w, "  no trace")
		return
	}
	writeTree(w, t, "  ")
}

// writeTree draws each hop as the child of the one before: a trace is the
// chain from the origin down to the object.
//
// A trace is read from annotations and records others may write, so what
// is drawn is bounded: at most maxTreeHops hops (the origin's first, then
// the last ones, the object's own included), indented at most
// maxTreeDepth levels.
func writeTree(w io.Writer, t trace.Trace, indent string) {
	shown := t
	left := 0
	if len(t) > maxTreeHops {
		left = len(t) - maxTreeHops
		shown = append(append(trace.Trace{}, t[:treeHead]...), t[treeHead+left:]...)
	}
	for i, h := range shown {
		prefix := indent
		if i > 0 {
			prefix += strings.Repeat("   ", min(i-1, maxTreeDepth)) + "└─ "
		}
		if left > 0 && i == treeHead {
			fmt.Fprintf(w, "%s… %d hops left out\n", prefix, left)
		}
		fmt.Fprintf(w, "%s%s\n", prefix, printf("%s", hopText(h)))
	}
}

const (
	maxTreeHops  = 40
	treeHead     = 5
	maxTreeDepth = 20
)

func hopText(h trace.Hop) string {
	var b strings.Builder
	b.WriteString(h.APIVersion + " " + h.Kind + " " + h.Name)
	b.WriteString(" (generation " + strconv.FormatInt(h.Generation, 10) + ")")
	if h.User != "" {
		b.WriteString(" by " + h.User)
	}
	if !h.Timestamp.IsZero() {
		b.WriteString(" at " + h.Timestamp.UTC().Format(time.RFC3339))
	}
	if len(h.Labels) > 0 {
		keys := make([]string, 0, len(h.Labels))
		for k := range h.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + h.Labels[k]
		}
		b.WriteString(" [" + strings.Join(parts, ", ") + "]")
	}
	return b.String()
}
