package kubectlplugin

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
)

// terminalControls are bytes a terminal acts on instead of showing.
func hasTerminalControl(s string) (string, bool) {
	for _, c := range []string{"\x1b]52", "\x07", "\r", "\x1b[2K", "\u202e"} {
		if strings.Contains(s, c) {
			return c, true
		}
	}
	return "", false
}

// Names on the screen come from records (and from a held create, whose name
// kube-apiserver never validated): the confirmation prompt, the detail title
// and the "resolved" status show them, and the terminal never acts on them
// (a clipboard write, a rewritten prompt line).
func TestTheDriftsScreenShowsRecordedNamesWithoutTerminalControls(t *testing.T) {
	evil := "web-1\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2K\rapprove once for ReplicaSet harmless"
	for _, tc := range []struct {
		name string
		keys []string
		drop bool // the drift leaves the list after the keys
	}{
		{name: "confirmation prompt", keys: []string{"a"}},
		{name: "detail title", keys: []string{"enter"}},
		{name: "resolved status", keys: []string{"enter"}, drop: true},
		{name: "resolved while confirming", keys: []string{"a"}, drop: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var applied []actionRequest
			m := testModel(t, &applied)
			m.Update(tea.WindowSizeMsg{Width: 200, Height: 40})
			rows := append([]DriftRow(nil), m.rows...)
			rows[0].Child.Name = evil
			rows[0].Parent.Name = "web\x1b[2K\rDeployment staging"
			m.Update(recordsMsg{rows: rows, synced: true})
			for _, k := range tc.keys {
				m.Update(keyMsg(k))
			}
			if tc.drop {
				m.Update(recordsMsg{rows: rows[1:], synced: true})
			}
			view := m.View()
			if c, bad := hasTerminalControl(view); bad {
				t.Errorf("the screen sends %q to the terminal:\n%q", c, view)
			}
		})
	}
}

// A user name (an OIDC claim) or a change path (a keyed list's id) with a
// line break in it adds no line to a drift's detail: no second "Mode:"
// line, no change the record does not hold.
func TestADriftsDetailHasOnlyItsOwnLines(t *testing.T) {
	var applied []actionRequest
	m := testModel(t, &applied)
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 80})
	m.Update(keyMsg("enter"))
	rows := append([]DriftRow(nil), m.rows...)
	rows[0].Controller = "oidc:mallory\nMode:        log, reported, detected 1s ago"
	rows[0].Changes = []desired.Change{{Path: "spec.items[name=a\n  - spec.replicas: 2]", Old: "1", New: "2"}}
	m.Update(recordsMsg{rows: rows, synced: true})
	view := m.View()
	var modeLines int
	for _, l := range strings.Split(view, "\n") {
		if strings.HasPrefix(l, "Mode:") {
			modeLines++
		}
		if strings.HasPrefix(l, "  - spec.replicas: 2") {
			t.Errorf("a change path forged the line %q:\n%s", l, view)
		}
	}
	if modeLines != 1 {
		t.Errorf("%d Mode: lines, the controller's name forged one:\n%s", modeLines, view)
	}
}

// The plain table (for scripts) has a row per drift and its own columns: a
// newline or a tab in a recorded string is no row or column of its own.
func TestTheDriftTableHasOneRowPerDrift(t *testing.T) {
	expectOneDriftRow(t, []desired.Change{{
		Path: "spec.items[name=x\nshop\tshadow\tshadow\tDeployment web\tReplicaSet web-1\tkube-system:deployment-controller\t-\t1s\nshop]",
		Old:  "1", New: "2"}})
}

// expectOneDriftRow prints a drift with changes as the table for scripts,
// which must have its header and the one row.
func expectOneDriftRow(t *testing.T, changes []desired.Change) {
	t.Helper()
	rows := sampleRows(t)[:1]
	rows[0].Changes = changes
	var buf bytes.Buffer
	printDriftTable(&buf, rows, nil, true, driftsNow)
	out := strings.TrimRight(buf.String(), "\n")
	if n := len(strings.Split(out, "\n")); n != 2 {
		t.Errorf("1 drift, %d lines (header + rows): a recorded string forged a row:\n%s", n, out)
	}
}

// Anyone who may edit the parent writes its freeze reason: a line break in
// it adds no line to why, such as a verdict that allows.
func TestWhyHasOnlyItsOwnLines(t *testing.T) {
	ex := Explanation{
		Child:  decision.ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "web-1"},
		Parent: &ParentView{Ref: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"}, Generation: 4},
		Freeze: &annotations.FreezeInfo{User: "mallory", Reason: "incident 42\nA desired-state write of the child by its controller now:\n  if the parent is settled:\n    Allow (Approved): approved"},
	}
	var buf bytes.Buffer
	o := &options{out: &buf}
	if err := o.print(ex, func(w io.Writer) { RenderWhy(w, ex, "replicaset.apps/web-1") }); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(l, "A desired-state write") || strings.Contains(l, "Allow (Approved)") && !strings.HasPrefix(l, "Freeze:") {
			t.Errorf("a freeze reason forged the line %q:\n%s", l, buf.String())
		}
	}
}

// A trace comes from a record or an annotation, up to hundreds of
// thousands of hops: drawn with one more level of indent per hop it would
// take gigabytes, and trace, why and the detail (drawn every frame) would
// hang. It is drawn bounded.
func TestALongTraceIsDrawnBounded(t *testing.T) {
	const hops = 3000
	tr := make(trace.Trace, hops)
	for i := range tr {
		tr[i] = trace.Hop{Name: "x"}
	}
	var buf bytes.Buffer
	start := time.Now()
	RenderTrace(&buf, decision.ObjectRef{Kind: "ReplicaSet", Name: "x"}, tr)
	// Linear: ~40 bytes a hop.
	if n := buf.Len(); n > 200*hops {
		t.Errorf("%d hops render as %d bytes (%v): quadratic; 350k hops would be ~180 GB", hops, n, time.Since(start))
	}
}

// Listing every namespace, the screen names each drift's namespace, and so
// does the confirmation of an action: drifts of shop/web and prod/web look
// alike otherwise, and the person would not know which one is approved.
func TestTheDriftsScreenNamesNamespaces(t *testing.T) {
	var applied []actionRequest
	m := newDriftsModel("all namespaces", func() time.Time { return driftsNow })
	m.allNamespaces = true
	m.apply = func(r actionRequest) tea.Cmd { applied = append(applied, r); return nil }
	rows, _ := rowsOf(sampleRecords(t), driftFilter{})
	a := rows[0]
	b := a
	b.ID = "00000000000000ff"
	b.Parent.Namespace, b.Child.Namespace = "prod", "prod"
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 40})
	m.Update(recordsMsg{rows: []DriftRow{a, b}, synced: true})
	lines := strings.Split(m.View(), "\n")
	// lines[0] title, [1] header, [2] and [3] the rows (marker aside).
	if strings.TrimPrefix(lines[2], "> ") == strings.TrimPrefix(lines[3], "  ") {
		t.Errorf("two drifts in %s and %s are the same line:\n%s\n%s", a.Child.Namespace, b.Child.Namespace, lines[2], lines[3])
	}
	m.Update(keyMsg("down"))
	m.Update(keyMsg("a"))
	view := m.View()
	if !strings.Contains(view, "prod") {
		t.Errorf("the confirmation does not say the drift is in namespace prod:\n%s", view)
	}
}

// 3b. The proxy's own diff writes a keyed list's id raw into the path
// ([name=<id>]); a held write never reached kube-apiserver's validation,
// so the id may hold a line break, and the table shows a forged row.
func TestADiffPathCannotAddARowToTheDriftTable(t *testing.T) {
	mk := func(envName string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "app", "env": []any{map[string]any{"name": envName, "value": "1"}}}}}}}}}
	}
	_, changes := desired.Changed(mk("A"), mk("A\nother\theld\tenforce\tDeployment db\tStatefulSet db\tx\t-\t1s"))
	if len(changes) == 0 {
		t.Fatal("no change")
	}
	expectOneDriftRow(t, changes)
}

// An allowance's fields come from an annotation the proxy writes, but a
// policy's name and an initiator's user name are others': a newline or a
// tab in them adds no row or column to the table of allowances.
func TestTheAllowanceTableHasOneRowPerAllowance(t *testing.T) {
	var a AllowanceView
	a.Kind, a.Mutation, a.Consumed = "Pod", "spec.image", "no"
	a.Policy = "policy\nPod\tdelete\t9\tyes\tmallory\tforged\t-"
	var buf bytes.Buffer
	allowanceTable(&buf, "  ", []AllowanceView{a})
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Errorf("1 allowance, %d lines: a recorded string forged a row:\n%s", n, buf.String())
	}
}
