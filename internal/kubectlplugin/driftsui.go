package kubectlplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// driftAction is what a key does to the selected drift's parent.
type driftAction struct {
	key     string
	name    string // as the prompt and the help line say it
	ask     string // what to type, "" for a yes/no confirmation
	initial string
	// approves: the edit approves the drift, which holds only while the
	// parent's spec is the one the drift was detected under.
	approves bool
	edit     func(child decision.ObjectRef, parent *unstructured.Unstructured, input string, st annotations.Stamp) (annotations.Edit, error)
}

var driftActions = []driftAction{
	{key: "a", name: "approve once", approves: true, edit: func(child decision.ObjectRef, p *unstructured.Unstructured, _ string, st annotations.Stamp) (annotations.Edit, error) {
		return approveEdit(child, p, annotations.ApprovalOnce, st)
	}},
	{key: "g", name: "approve for this generation", approves: true, edit: func(child decision.ObjectRef, p *unstructured.Unstructured, _ string, st annotations.Stamp) (annotations.Edit, error) {
		return approveEdit(child, p, annotations.ApprovalGeneration, st)
	}},
	{key: "r", name: "reject", ask: "reason (shown in every denial)", edit: func(child decision.ObjectRef, p *unstructured.Unstructured, reason string, st annotations.Stamp) (annotations.Edit, error) {
		return rejectEdit(child, p, reason, false, st)
	}},
	{key: "s", name: "snooze the parent", ask: "for how long", initial: "1h", edit: func(_ decision.ObjectRef, _ *unstructured.Unstructured, d string, st annotations.Stamp) (annotations.Edit, error) {
		dur, err := time.ParseDuration(d)
		if err != nil {
			return annotations.Edit{}, err
		}
		return annotations.SetSnooze(dur, "", st)
	}},
	{key: "f", name: "freeze the parent", ask: "reason (shown in every denial)", edit: func(_ decision.ObjectRef, p *unstructured.Unstructured, reason string, st annotations.Stamp) (annotations.Edit, error) {
		return annotations.SetFreeze(p.GetAnnotations()[annotations.Freeze], reason, st)
	}},
	{key: "u", name: "unfreeze the parent", edit: func(_ decision.ObjectRef, p *unstructured.Unstructured, _ string, _ annotations.Stamp) (annotations.Edit, error) {
		return annotations.Unfreeze(p.GetAnnotations()[annotations.Freeze]), nil
	}},
}

// validate checks what the person typed before anything is written.
func (a driftAction) validate(input string) error {
	switch a.key {
	case "r", "f":
		if strings.TrimSpace(input) == "" {
			return errors.New("a reason is required: the proxy shows it in every denial")
		}
	case "s":
		d, err := time.ParseDuration(strings.TrimSpace(input))
		if err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration such as 30m or 2h, not %q", input)
		}
	}
	return nil
}

func actionFor(key string) (driftAction, bool) {
	for _, a := range driftActions {
		if a.key == key {
			return a, true
		}
	}
	return driftAction{}, false
}

// actionRequest is a confirmed action.
type actionRequest struct {
	action driftAction
	row    DriftRow
	input  string
}

// Messages from the source and the actions.
type (
	recordsMsg struct {
		rows     []DriftRow
		problems []string
		err      string
		synced   bool
	}
	actionDoneMsg struct {
		summary string
		err     error
	}
	explainedMsg struct {
		id   string
		text string
		err  error
	}
)

// prompt is an action waiting for the person's confirmation.
type prompt struct {
	action driftAction
	row    DriftRow
	input  textinput.Model
}

// driftsModel is the terminal UI. Its I/O is behind apply and explain, so
// update and view are pure and tested as tables.
type driftsModel struct {
	scope string
	// allNamespaces: the list names each drift's namespace.
	allNamespaces bool
	now           func() time.Time
	apply         func(actionRequest) tea.Cmd
	explain       func(DriftRow) tea.Cmd
	rows          []DriftRow
	problems      []string
	// sourceErr is why the list may be stale; synced: it was read once.
	sourceErr string
	synced    bool
	cursor    int
	// detailID is the drift shown in detail, "" in the list.
	detailID string
	why      string
	scroll   int
	prompt   *prompt
	status   string
	width    int
	height   int
	quitting bool
}

func newDriftsModel(scope string, now func() time.Time) *driftsModel {
	return &driftsModel{scope: scope, now: now, width: 80, height: 24,
		apply:   func(actionRequest) tea.Cmd { return nil },
		explain: func(DriftRow) tea.Cmd { return nil }}
}

func (m *driftsModel) Init() tea.Cmd { return nil }

func (m *driftsModel) selected() (DriftRow, bool) {
	if m.detailID != "" {
		for _, r := range m.rows {
			if r.ID == m.detailID {
				return r, true
			}
		}
		return DriftRow{}, false
	}
	if m.cursor < len(m.rows) {
		return m.rows[m.cursor], true
	}
	return DriftRow{}, false
}

func (m *driftsModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case recordsMsg:
		m.setRows(msg)
	case actionDoneMsg:
		if msg.err != nil {
			m.status = "error: " + oneLine(msg.err.Error())
		} else {
			m.status = oneLine(msg.summary)
		}
	case explainedMsg:
		if msg.id == m.detailID {
			if msg.err != nil {
				m.why = "why: " + oneLine(msg.err.Error())
			} else {
				m.why = msg.text
			}
		}
	case tea.KeyMsg:
		return m, m.key(msg)
	}
	return m, nil
}

func (m *driftsModel) setRows(msg recordsMsg) {
	var keep string
	shown, _ := m.selected()
	if m.detailID == "" {
		keep = shown.ID
	}
	m.rows, m.problems, m.sourceErr = msg.rows, msg.problems, msg.err
	m.synced = m.synced || msg.synced
	if m.detailID != "" {
		if _, ok := m.selected(); !ok {
			m.status = printf("the drift of %s was resolved and left the list", namespacedText(shown.Child))
			m.detailID, m.why, m.scroll = "", "", 0
		}
	}
	if m.prompt != nil {
		if !m.has(m.prompt.row.ID) {
			m.status = printf("the drift of %s was resolved; nothing was written", namespacedText(m.prompt.row.Child))
			m.prompt = nil
		}
	}
	for i, r := range m.rows {
		if r.ID == keep {
			m.cursor = i
		}
	}
	if m.cursor >= len(m.rows) {
		m.cursor = max(len(m.rows)-1, 0)
	}
}

func (m *driftsModel) has(id string) bool {
	for _, r := range m.rows {
		if r.ID == id {
			return true
		}
	}
	return false
}

func (m *driftsModel) key(k tea.KeyMsg) tea.Cmd {
	if k.Type == tea.KeyCtrlC {
		m.quitting = true
		return tea.Quit
	}
	if m.prompt != nil {
		return m.promptKey(k)
	}
	switch k.String() {
	case "q":
		m.quitting = true
		return tea.Quit
	case "esc", "backspace", "left", "h":
		if m.detailID != "" {
			m.detailID, m.why, m.scroll = "", "", 0
		}
		return nil
	case "up", "k":
		if m.detailID != "" {
			m.scroll = max(m.scroll-1, 0)
		} else if m.cursor > 0 {
			m.cursor--
		}
		return nil
	case "down", "j":
		if m.detailID != "" {
			m.scroll++
		} else if m.cursor < len(m.rows)-1 {
			m.cursor++
		}
		return nil
	case "enter", "right", "l":
		if r, ok := m.selected(); ok && m.detailID == "" {
			m.detailID, m.why, m.scroll = r.ID, "why: reading the child and its parent…", 0
			return m.explain(r)
		}
		return nil
	}
	a, ok := actionFor(k.String())
	if !ok {
		return nil
	}
	r, ok := m.selected()
	if !ok {
		m.status = "no drift selected"
		return nil
	}
	in := textinput.New()
	in.Prompt = ""
	in.SetValue(a.initial)
	in.CharLimit = 200
	in.Focus()
	m.prompt = &prompt{action: a, row: r, input: in}
	m.status = ""
	return nil
}

func (m *driftsModel) promptKey(k tea.KeyMsg) tea.Cmd {
	p := m.prompt
	if k.Type == tea.KeyEsc {
		m.prompt = nil
		m.status = "cancelled; nothing was written"
		return nil
	}
	if p.action.ask == "" {
		switch k.String() {
		case "y", "Y":
			m.prompt = nil
			m.status = p.action.name + ": writing…"
			return m.apply(actionRequest{action: p.action, row: p.row})
		default:
			m.prompt = nil
			m.status = "cancelled; nothing was written"
		}
		return nil
	}
	if k.Type == tea.KeyEnter {
		v := strings.TrimSpace(p.input.Value())
		if err := p.action.validate(v); err != nil {
			m.status = "error: " + oneLine(err.Error())
			return nil
		}
		m.prompt = nil
		m.status = p.action.name + ": writing…"
		return m.apply(actionRequest{action: p.action, row: p.row, input: v})
	}
	var cmd tea.Cmd
	p.input, cmd = p.input.Update(k)
	return cmd
}

var (
	titleStyle    = lipgloss.NewStyle().Bold(true)
	headerStyle   = lipgloss.NewStyle().Bold(true).Underline(true)
	selectedStyle = lipgloss.NewStyle().Reverse(true)
	heldStyle     = lipgloss.NewStyle().Foreground(lipgloss.Color("1")).Bold(true)
	dimStyle      = lipgloss.NewStyle().Faint(true)
	errorStyle    = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
)

func (m *driftsModel) View() string {
	if m.quitting {
		return ""
	}
	var body []string
	if m.detailID != "" {
		if r, ok := m.selected(); ok {
			body = m.detailLines(r)
		}
	} else {
		body = m.listLines()
	}
	foot := m.footerLines()
	// The footer stays on screen: a long detail scrolls above it.
	room := max(m.height-len(foot), 1)
	if m.detailID != "" && len(body) > room {
		head := body[:1]
		rest := body[1:]
		s := min(m.scroll, max(len(rest)-(room-1), 0))
		m.scroll = s
		body = append(head, rest[s:min(s+room-1, len(rest))]...)
	} else if len(body) > room {
		body = body[:room]
	}
	for len(body) < room {
		body = append(body, "")
	}
	return strings.Join(append(body, foot...), "\n")
}

func (m *driftsModel) fit(s string) string {
	return ansi.Truncate(s, m.width, "…")
}

func (m *driftsModel) listLines() []string {
	held := 0
	for _, r := range m.rows {
		if r.Held {
			held++
		}
	}
	title := fmt.Sprintf("kubectl kausality drifts — %d open, %d held (%s)", len(m.rows), held, m.scope)
	lines := []string{titleStyle.Render(m.fit(title))}
	if !m.synced {
		if m.sourceErr != "" {
			// An empty list here would say all is well.
			return append(lines, "", "The drift records cannot be read; retrying (the error is below).")
		}
		return append(lines, "reading the drift records…")
	}
	if len(m.rows) == 0 {
		return append(lines, "", "No open drifts.")
	}
	cols := m.columns()
	cols.namespaced = m.allNamespaces
	lines = append(lines, headerStyle.Render(m.fit(cols.header())))
	now := m.now()
	for i, r := range m.rows {
		marker := "  "
		if i == m.cursor {
			marker = "> "
		}
		line := m.fit(cols.row(marker, r, now))
		switch {
		case i == m.cursor:
			line = selectedStyle.Render(line)
		case r.Held:
			line = heldStyle.Render(line)
		}
		lines = append(lines, line)
	}
	return lines
}

// columns share the terminal's width: the changes get what is left. A
// terminal narrower than wideColumns shows the mode only where it is not
// implied (held is enforce) and leaves the controller to the detail.
type columns struct {
	narrow, namespaced                bool
	parent, child, controller, change int
}

const wideColumns = 120

func (m *driftsModel) columns() columns {
	if m.width < wideColumns {
		// marker 2, state 8, age 5, separators 4
		free := max(m.width-19, 40)
		c := columns{narrow: true, parent: free * 26 / 100, child: free * 42 / 100}
		c.change = free - c.parent - c.child
		return c
	}
	// marker 2, state 9, mode 8, age 5, separators 3
	free := m.width - 27
	c := columns{parent: free * 20 / 100, child: free * 24 / 100, controller: free * 22 / 100}
	c.change = free - c.parent - c.child - c.controller
	return c
}

// cell is one column of a row. Names, paths and values come from the
// controller's write and from annotations: a terminal shows them, never
// acts on them.
func cell(s string, w int) string {
	s = ansi.Truncate(annotations.Printable(s), w, "…")
	return s + strings.Repeat(" ", max(w-ansi.StringWidth(s), 0))
}

func (c columns) header() string {
	if c.narrow {
		return "  " + cell("STATE", 8) + cell("PARENT", c.parent) + " " + cell("CHILD", c.child) + " " + cell("CHANGES", c.change) + " AGE"
	}
	return "  " + cell("STATE", 9) + cell("MODE", 8) + cell("PARENT", c.parent) + " " + cell("CHILD", c.child) + " " +
		cell("CONTROLLER", c.controller) + " " + cell("CHANGES", c.change) + " AGE"
}

func (c columns) row(marker string, r DriftRow, now time.Time) string {
	objectText := objectText
	if c.namespaced {
		objectText = namespacedText
	}
	if c.narrow {
		state := r.State()
		if !r.Held {
			state = modeText(r.Mode)
		}
		return marker + cell(state, 8) + cell(objectText(r.Parent), c.parent) + " " + cell(objectText(r.Child), c.child) + " " +
			cell(changesText(r.Changes), c.change) + " " + age(now, r.DetectedAt)
	}
	return marker + cell(r.State(), 9) + cell(modeText(r.Mode), 8) + cell(objectText(r.Parent), c.parent) + " " +
		cell(objectText(r.Child), c.child) + " " + cell(shortUser(r.Controller), c.controller) + " " +
		cell(changesText(r.Changes), c.change) + " " + age(now, r.DetectedAt)
}

func (m *driftsModel) detailLines(r DriftRow) []string {
	var lines []string
	// Wrapped, not cut: the approval entry is for copying.
	addRendered := func(text string) {
		text = ansi.Hardwrap(annotations.PrintableLines(text), m.width, true)
		lines = append(lines, strings.Split(text, "\n")...)
	}
	add := func(format string, args ...any) { addRendered(printf(format, args...)) }
	lines = append(lines, titleStyle.Render(m.fit(printf("Drift %s of %s (%s)", r.ID, r.Child, r.State()))))
	add("Parent:      %s (generation %d)", r.Parent, r.ParentGeneration)
	add("Controller:  %s", r.Controller)
	add("Mode:        %s, %s, detected %s ago", modeText(r.Mode), r.State(), age(m.now(), r.DetectedAt))
	add("Changes:")
	if len(r.Changes) == 0 {
		add("  (not recorded)")
	}
	for _, c := range r.Changes {
		if c.Old == "" && c.New == "" {
			add("  ~ %s", c.Path)
			continue
		}
		add("  - %s: %s", c.Path, c.Old)
		add("  + %s: %s", c.Path, c.New)
	}
	if a := r.Allowances; a != nil {
		add("Allowances:  %s: mutations no allowance on the parent covers", a.Mode)
		for _, v := range a.Violations {
			add("  %s: needs {kind: %s, mutation: %s} in %s of %s", v.Field, v.NeededKind, v.NeededMutation, annotations.Allowances, objectText(r.Parent))
		}
		add("  An approval does not grant an allowance: a change of %s by someone an AllowancePolicy lets initiate it does.", objectText(r.Parent))
	}
	var tree strings.Builder
	printer := &printer{w: &tree}
	printer.traceSection(r.Trace, r.TraceError)
	addRendered(strings.TrimRight(tree.String(), "\n"))
	entry, _ := json.Marshal([]annotations.Approval{r.Approval()})
	add("Unblock once: %s on %s:", annotations.Approvals, r.Parent)
	add("  %s", entry)
	add("")
	add("Now, as kubectl kausality why explains it:")
	addRendered(strings.TrimRight(m.why, "\n"))
	return lines
}

func (m *driftsModel) footerLines() []string {
	var out []string
	if m.sourceErr != "" {
		out = append(out, m.wrapped("error: "+oneLine(m.sourceErr))...)
	}
	if n := len(m.problems); n > 0 {
		out = append(out, errorStyle.Render(m.fit(fmt.Sprintf("%d drift record(s) unreadable: %s", n, oneLine(m.problems[0])))))
	}
	if m.prompt != nil {
		p := m.prompt
		q := printf("%s for %s on %s? ", p.action.name, namespacedText(p.row.Child), namespacedText(p.row.Parent))
		if p.action.ask == "" {
			q += "[y/N]"
		} else {
			q = fmt.Sprintf("%s%s: %s  (enter to confirm, esc to cancel)", q, p.action.ask, p.input.View())
		}
		return append(out, m.fit(q))
	}
	if strings.HasPrefix(m.status, "error: ") {
		out = append(out, m.wrapped(m.status)...)
	} else if m.status != "" {
		out = append(out, m.fit(m.status))
	}
	help := "↑/↓ select · enter open · a approve once · g approve generation · r reject · s snooze · f freeze · u unfreeze · q quit"
	if m.detailID != "" {
		help = "↑/↓ scroll · esc back · a approve once · g approve generation · r reject · s snooze · f freeze · u unfreeze · q quit"
	}
	return append(out, dimStyle.Render(m.fit(help)))
}

// wrapped shows an error whole on a narrow terminal, up to three lines:
// what matters (forbidden, refused) often comes last.
func (m *driftsModel) wrapped(s string) []string {
	lines := strings.Split(ansi.Wrap(s, m.width, ""), "\n")
	if len(lines) > 3 {
		lines = lines[:3]
		lines[2] = ansi.Truncate(lines[2]+" …", m.width, "…")
	}
	for i, l := range lines {
		lines[i] = errorStyle.Render(l)
	}
	return lines
}

// oneLine keeps an error to one line a terminal shows as it is.
func oneLine(s string) string {
	return strings.Join(strings.Fields(annotations.PrintableLines(s)), " ")
}
