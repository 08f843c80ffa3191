// Package shadowreport reads the proxy's decision log and summarizes, per
// controller, what shadow mode would have done: the page an operator reads
// before switching a controller from shadow to enforce.
package shadowreport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kausality-io/kausality-proxy/intercept/decisionlog"
)

// line is a decision line as it appears in the JSON log.
type line struct {
	Msg string `json:"msg"`
	decisionlog.Line
}

// Controller is the summary of one controller's shadowed writes.
type Controller struct {
	Name string `json:"name"`
	// Writes is how many of its writes were decided in shadow mode.
	Writes int `json:"writes"`
	// WouldDeny is how many would have been denied.
	WouldDeny int `json:"wouldDeny"`
	// WouldWarn is how many were drift allowed with a warning (log mode).
	WouldWarn int `json:"wouldWarn"`
	// Errors is how many could not be decided.
	Errors int `json:"errors"`
	// Parents maps each parent to the number of would-be denials under it.
	Parents map[string]int `json:"parents,omitempty"`
	// Categories counts would-be denials by reason category.
	Categories map[string]int `json:"categories,omitempty"`
	// Children lists up to a few denied children as examples.
	Examples []string `json:"examples,omitempty"`
}

// Report is the whole summary.
type Report struct {
	Controllers []*Controller `json:"controllers"`
	// Lines is how many decision lines were read, Skipped how many input
	// lines were not decision lines (other log output, broken JSON).
	Lines   int `json:"lines"`
	Skipped int `json:"skipped"`
}

const maxExamples = 5

// Read builds the report from a decision log. Only shadow decisions count;
// a line without a configured controller name is grouped by user.
func Read(r io.Reader) (*Report, error) {
	rep := &Report{}
	byName := map[string]*Controller{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for s.Scan() {
		raw := strings.TrimSpace(s.Text())
		var l line
		if raw == "" || raw[0] != '{' || json.Unmarshal([]byte(raw), &l) != nil || l.Msg != decisionlog.Message {
			rep.Skipped++
			continue
		}
		rep.Lines++
		if !l.Shadow {
			continue
		}
		name := l.Controller
		if name == "" {
			name = l.User
		}
		c := byName[name]
		if c == nil {
			c = &Controller{Name: name, Parents: map[string]int{}, Categories: map[string]int{}}
			byName[name] = c
			rep.Controllers = append(rep.Controllers, c)
		}
		c.Writes++
		switch {
		case l.Decision == decisionlog.DecisionError:
			c.Errors++
		case l.WouldDeny || l.Decision == "Deny":
			c.WouldDeny++
			c.Categories[l.Category]++
			parent := l.Parent
			if parent == "" {
				parent = "(no parent)"
			}
			c.Parents[parent]++
			if len(c.Examples) < maxExamples {
				c.Examples = append(c.Examples, fmt.Sprintf("%s %s/%s (%s)", l.Resource, l.Namespace, l.Name, l.Category))
			}
		case l.Drift:
			c.WouldWarn++
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	sort.Slice(rep.Controllers, func(i, j int) bool {
		a, b := rep.Controllers[i], rep.Controllers[j]
		if a.WouldDeny != b.WouldDeny {
			return a.WouldDeny > b.WouldDeny
		}
		return a.Name < b.Name
	})
	return rep, nil
}

// WriteText prints the report for people.
func (rep *Report) WriteText(w io.Writer) error {
	if len(rep.Controllers) == 0 {
		_, err := fmt.Fprintf(w, "No shadow-mode decisions in %d decision lines. Put a controller in shadow mode in the --config file first.\n", rep.Lines)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTROLLER\tWRITES\tWOULD DENY\tWOULD WARN\tERRORS\tVERDICT")
	for _, c := range rep.Controllers {
		verdict := "ready for enforce"
		switch {
		case c.WouldDeny > 0:
			verdict = "would block writes: review the parents below"
		case c.Errors > 0:
			verdict = "undecided writes: see the proxy log"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", c.Name, c.Writes, c.WouldDeny, c.WouldWarn, c.Errors, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range rep.Controllers {
		if c.WouldDeny == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s would have been denied %d time(s):\n", c.Name, c.WouldDeny)
		for _, p := range sortedKeys(c.Parents) {
			fmt.Fprintf(w, "  parent %s: %d\n", p, c.Parents[p])
		}
		for _, k := range sortedKeys(c.Categories) {
			fmt.Fprintf(w, "  reason %s: %d\n", k, c.Categories[k])
		}
		for _, e := range c.Examples {
			fmt.Fprintf(w, "  e.g. %s\n", e)
		}
	}
	_, err := fmt.Fprintf(w, "\n%d decision lines read, %d other lines skipped.\n", rep.Lines, rep.Skipped)
	return err
}

// WriteJSON prints the report for tools.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}
