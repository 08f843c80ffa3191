package kubectlplugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

func sampleRows(t *testing.T) []DriftRow {
	rows, _ := rowsOf(sampleRecords(t), driftFilter{namespace: "shop"})
	return rows
}

// keyMsg is what bubbletea delivers for a key a person presses.
func keyMsg(k string) tea.KeyMsg {
	switch k {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

// testModel is a model over the sample rows whose actions are recorded,
// not applied.
func testModel(t *testing.T, applied *[]actionRequest) *driftsModel {
	m := newDriftsModel("namespace shop", func() time.Time { return driftsNow })
	m.apply = func(r actionRequest) tea.Cmd {
		*applied = append(*applied, r)
		return nil
	}
	m.Update(recordsMsg{rows: sampleRows(t), synced: true})
	return m
}

func TestDriftsModelKeys(t *testing.T) {
	tests := []struct {
		name        string
		keys        []string
		wantApplied string // action name, child, input
		wantDetail  bool
		wantPrompt  bool
		wantQuit    bool
		wantStatus  string
	}{
		{name: "approve once confirmed", keys: []string{"a", "y"}, wantApplied: "approve once web-1 "},
		{name: "approve once declined", keys: []string{"a", "n"}, wantStatus: "cancelled; nothing was written"},
		{name: "approve once escaped", keys: []string{"a", "esc"}, wantStatus: "cancelled; nothing was written"},
		{name: "approve generation of the second row", keys: []string{"down", "g", "y"}, wantApplied: "approve for this generation web-2 "},
		{name: "cursor stops at the last row", keys: []string{"down", "down", "down", "down", "a", "y"}, wantApplied: "approve once web-3 "},
		{name: "cursor stops at the first row", keys: []string{"up", "k", "a", "y"}, wantApplied: "approve once web-1 "},
		{name: "reject needs a reason", keys: []string{"r", "enter"}, wantPrompt: true, wantStatus: "error: a reason is required: the proxy shows it in every denial"},
		{name: "reject with a reason", keys: []string{"r", "needs review", "enter"}, wantApplied: "reject web-1 needs review"},
		{name: "snooze defaults to an hour", keys: []string{"s", "enter"}, wantApplied: "snooze the parent web-1 1h"},
		{name: "snooze refuses a bad duration", keys: []string{"s", "x", "enter"}, wantPrompt: true, wantStatus: `error: want a positive duration such as 30m or 2h, not "1hx"`},
		{name: "freeze with a reason", keys: []string{"j", "f", "incident", "enter"}, wantApplied: "freeze the parent web-2 incident"},
		{name: "unfreeze", keys: []string{"u", "y"}, wantApplied: "unfreeze the parent web-1 "},
		{name: "enter opens the detail", keys: []string{"enter"}, wantDetail: true},
		{name: "esc leaves the detail", keys: []string{"enter", "esc"}},
		{name: "an action from the detail", keys: []string{"down", "enter", "a", "y"}, wantDetail: true, wantApplied: "approve once web-2 "},
		{name: "q quits", keys: []string{"q"}, wantQuit: true},
		{name: "q in a prompt is typed, not quit", keys: []string{"r", "q"}, wantPrompt: true},
		{name: "ctrl-c quits from a prompt", keys: []string{"r", "ctrl+c"}, wantQuit: true, wantPrompt: true},
		{name: "unknown keys do nothing", keys: []string{"x", "Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var applied []actionRequest
			m := testModel(t, &applied)
			var quit bool
			for _, k := range tt.keys {
				_, cmd := m.Update(keyMsg(k))
				if cmd != nil {
					if _, ok := cmd().(tea.QuitMsg); ok {
						quit = true
					}
				}
			}
			var got string
			if len(applied) > 0 {
				got = applied[0].action.name + " " + applied[0].row.Child.Name + " " + applied[0].input
			}
			if len(applied) > 1 || got != tt.wantApplied {
				t.Errorf("applied %q (%d), want %q", got, len(applied), tt.wantApplied)
			}
			if (m.detailID != "") != tt.wantDetail || (m.prompt != nil) != tt.wantPrompt || quit != tt.wantQuit || m.quitting != tt.wantQuit {
				t.Errorf("detail %q, prompt %v, quit %v/%v", m.detailID, m.prompt != nil, quit, m.quitting)
			}
			if tt.wantStatus != "" && m.status != tt.wantStatus {
				t.Errorf("status %q, want %q", m.status, tt.wantStatus)
			}
			if quit && m.View() != "" {
				t.Errorf("the last frame is not empty: the terminal would not be left as it was")
			}
		})
	}
}

// Every line of every screen fits an 80-column terminal, and says what a
// person needs for each state of a drift.
func TestDriftsModelView(t *testing.T) {
	forbidden := errors.New(`deployments.apps "web" is forbidden: User "dave" cannot patch resource "deployments" in API group "apps" in the namespace "shop"`)
	tests := []struct {
		name  string
		width int
		setup func(m *driftsModel)
		want  []string
		not   []string
	}{
		{name: "list", width: 80, want: []string{
			"kubectl kausality drifts — 3 open, 1 held (namespace shop)",
			"> held    Deployment web  ReplicaSet web-1",
			"  log     Deployment web  ReplicaSet web-2",
			"  shadow  Deployment web  ReplicaSet web-3",
			"spec.replicas: 3 → 2",
			"120m", "3m", "10s",
			"a approve once",
		}},
		{name: "wide list shows the whole change", width: 200, want: []string{"kube-system:deployment-controller",
			"> held     enforce Deployment web", "  reported log     Deployment web", "  shadow   shadow  Deployment web"}},
		{name: "before the first read", width: 80, setup: func(m *driftsModel) {
			*m = *newDriftsModel("namespace shop", m.now)
		}, want: []string{"reading the drift records…"}},
		{name: "no drifts", width: 80, setup: func(m *driftsModel) {
			m.Update(recordsMsg{synced: true})
		}, want: []string{"0 open, 0 held", "No open drifts."}},
		{name: "detail of a held drift", width: 80, setup: func(m *driftsModel) {
			m.Update(keyMsg("enter"))
			m.Update(explainedMsg{id: "0000000000000001", text: "Child:       apps/v1 ReplicaSet shop/web-1\nA desired-state write of the child by its controller now:\n    Deny (DriftUnapproved): drift"})
		}, want: []string{
			"Drift 0000000000000001 of apps/v1 ReplicaSet shop/web-1 (held)",
			"Parent:      apps/v1 Deployment shop/web (generation 4)",
			"Mode:        enforce, held, detected 120m ago",
			"  - spec.replicas: 3",
			"  + spec.replicas: 2",
			"Trace:",
			"└─ apps/v1 ReplicaSet web-1 (generation 2)",
			`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":4,"mo`,
			`de":"once"}]`,
			"Deny (DriftUnapproved)",
			"esc back",
		}},
		{name: "detail of an allowance violation", width: 100, setup: func(m *driftsModel) {
			rows := append([]DriftRow(nil), m.rows...)
			rows[0].Allowances = &v1alpha1.AllowanceVerdict{Mode: "enforce", Violations: []v1alpha1.AllowanceViolation{
				{Field: "spec.template", NeededKind: "ReplicaSet", NeededMutation: "spec.template"}}}
			m.Update(recordsMsg{rows: rows, synced: true})
			m.Update(keyMsg("enter"))
		}, want: []string{
			"Allowances:  enforce: mutations no allowance on the parent covers",
			"  spec.template: needs {kind: ReplicaSet, mutation: spec.template} in kausal.io/allowances of",
			"An approval does not grant an allowance",
		}},
		{name: "detail of a reported drift", width: 80, setup: func(m *driftsModel) {
			m.Update(keyMsg("down"))
			m.Update(keyMsg("enter"))
		}, want: []string{"(reported)", "Mode:        log, reported", "why: reading the child and its parent…"}},
		{name: "detail whose why failed", width: 80, setup: func(m *driftsModel) {
			m.Update(keyMsg("enter"))
			m.Update(explainedMsg{id: "0000000000000001", err: errors.New("replicasets.apps \"web-1\" not found")})
		}, want: []string{`why: replicasets.apps "web-1" not found`}},
		{name: "confirmation", width: 80, setup: func(m *driftsModel) { m.Update(keyMsg("a")) },
			want: []string{"approve once for ReplicaSet shop/web-1 on Deployment shop/web? [y/N]"}},
		{name: "reason prompt", width: 80, setup: func(m *driftsModel) { m.Update(keyMsg("r")) },
			want: []string{"reject for ReplicaSet shop/web-1 on Deployment shop/web? reason"}},
		{name: "a 403 is one line", width: 80, setup: func(m *driftsModel) {
			m.Update(actionDoneMsg{err: forbidden})
		}, want: []string{`error: deployments.apps "web" is forbidden: User "dave" cannot patch`, `"deployments" in API group "apps" in the namespace "shop"`}},
		{name: "an unreachable cluster is one line and the list stays", width: 80, setup: func(m *driftsModel) {
			m.Update(recordsMsg{rows: m.rows, synced: true, err: "reading the drift records in namespace kausality-system: dial tcp 127.0.0.1:6443: connect: connection refused"})
		}, want: []string{"error: reading the drift records in namespace kausality-system: dial tcp", "connection refused", "3 open"}},
		{name: "records that cannot be read at all are not an empty list", width: 80, setup: func(m *driftsModel) {
			*m = *newDriftsModel("namespace shop", m.now)
			m.Update(recordsMsg{err: `reading the drift records in namespace kausality-system: configmaps is forbidden: User "dave" cannot list resource "configmaps"`})
		}, want: []string{"The drift records cannot be read; retrying", "error: reading the drift records in namespace kausality-system: configmaps is", `forbidden: User "dave" cannot list`},
			not: []string{"No open drifts."}},
		{name: "unreadable records are one line", width: 80, setup: func(m *driftsModel) {
			m.Update(recordsMsg{rows: m.rows, synced: true, problems: []string{"drift record kausality-drift-x: the \"report\" key is not a DriftReport: unexpected end of JSON input"}})
		}, want: []string{`1 drift record(s) unreadable: drift record kausality-drift-x`}},
		{name: "a resolved drift leaves the detail and the list", width: 80, setup: func(m *driftsModel) {
			m.Update(keyMsg("enter"))
			m.Update(recordsMsg{rows: m.rows[1:], synced: true})
		}, want: []string{"2 open, 0 held", "the drift of ReplicaSet shop/web-1 was resolved and left the list"}, not: []string{"> held", "Drift 0000000000000001"}},
		{name: "a drift resolved while confirming writes nothing", width: 80, setup: func(m *driftsModel) {
			m.Update(keyMsg("a"))
			m.Update(recordsMsg{rows: m.rows[1:], synced: true})
		}, want: []string{"the drift of ReplicaSet shop/web-1 was resolved; nothing was written"}, not: []string{"[y/N]"}},
		{name: "a written value's escape sequences are shown, not acted on", width: 80, setup: func(m *driftsModel) {
			rows := append([]DriftRow(nil), m.rows...)
			rows[0].Changes = []desired.Change{{Path: "data.x", Old: `"a"`, New: "\"\x1b[2J\""}}
			m.Update(recordsMsg{rows: rows, synced: true})
		}, want: []string{`data.x: "a" → "\x1b[`}, not: []string{"\x1b[2J"}},
		{name: "a written value's escape sequences in the detail", width: 80, setup: func(m *driftsModel) {
			rows := append([]DriftRow(nil), m.rows...)
			rows[0].Changes = []desired.Change{{Path: "data.x", Old: `"a"`, New: "\"\x1b[2J\""}}
			m.Update(recordsMsg{rows: rows, synced: true})
			m.Update(keyMsg("enter"))
		}, want: []string{`+ data.x: "\x1b[2J"`}, not: []string{"\x1b[2J"}},
		{name: "an annotation's escape sequences are shown, not acted on", width: 80, setup: func(m *driftsModel) {
			m.Update(actionDoneMsg{summary: "freeze set: \x1b[31mred\x1b[0m"})
		}, not: []string{"\x1b[31m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var applied []actionRequest
			m := testModel(t, &applied)
			m.Update(tea.WindowSizeMsg{Width: tt.width, Height: 40})
			if tt.setup != nil {
				tt.setup(m)
			}
			view := m.View()
			for _, w := range tt.want {
				if !strings.Contains(view, w) {
					t.Errorf("the screen does not show %q:\n%s", w, view)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(view, n) {
					t.Errorf("the screen shows %q:\n%s", n, view)
				}
			}
			lines := strings.Split(view, "\n")
			if len(lines) > 40 {
				t.Errorf("%d lines on a 40-line terminal", len(lines))
			}
			for _, l := range lines {
				if w := ansi.StringWidth(l); w > tt.width {
					t.Errorf("a line of %d columns on a %d-column terminal: %q", w, tt.width, l)
				}
			}
			if len(applied) != 0 {
				t.Errorf("rendering applied %d actions", len(applied))
			}
		})
	}
}

func TestDriftRowState(t *testing.T) {
	for _, tt := range []struct {
		row  DriftRow
		want string
	}{
		{DriftRow{Held: true, Mode: annotations.ModeEnforce}, "held"},
		{DriftRow{Mode: annotations.ModeLog}, "reported"},
		{DriftRow{Mode: annotations.ModeShadow}, "shadow"},
		{DriftRow{}, "reported"},
	} {
		if got := tt.row.State(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.row, got, tt.want)
		}
	}
}
