package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decisionlog"
)

// decisionConsole is the console of `make run`: a person watches it while
// kube-controller-manager writes many times a second, so a decision line
// shows there only when it is news (see summarize); every other log entry
// goes to next. The full JSON lines are written to a file by another core.
type decisionConsole struct {
	next    zapcore.Core
	mu      *sync.Mutex
	out     io.Writer
	repeats map[string]*repeat
}

// repeat is a console line printed at since, and how many times it came
// again since: a denied controller retries the same write with backoff,
// and the person needs to see it once a minute, not each time.
type repeat struct {
	since time.Time
	count int
}

const repeatWindow = time.Minute

func newDecisionConsole(next zapcore.Core, out io.Writer) zapcore.Core {
	return &decisionConsole{next: next, mu: &sync.Mutex{}, out: out, repeats: map[string]*repeat{}}
}

func (c *decisionConsole) Enabled(l zapcore.Level) bool { return c.next.Enabled(l) }

func (c *decisionConsole) With(fields []zapcore.Field) zapcore.Core {
	return &decisionConsole{next: c.next.With(fields), mu: c.mu, out: c.out, repeats: c.repeats}
}

func (c *decisionConsole) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == decisionlog.Message {
		return ce.AddCore(e, c)
	}
	return c.next.Check(e, ce)
}

func (c *decisionConsole) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if e.Message != decisionlog.Message {
		return c.next.Write(e, fields)
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	line, ok := summarize(enc.Fields)
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	suffix := ""
	if r, ok := c.repeats[line]; ok {
		if e.Time.Sub(r.since) < repeatWindow {
			r.count++
			return nil
		}
		if r.count > 0 {
			suffix = fmt.Sprintf(" (and %d times since %s)", r.count, r.since.Format("15:04:05"))
		}
	}
	for k, r := range c.repeats {
		if e.Time.Sub(r.since) >= repeatWindow {
			delete(c.repeats, k)
		}
	}
	c.repeats[line] = &repeat{since: e.Time}
	_, err := fmt.Fprintf(c.out, "%s %s%s\n", e.Time.Format("15:04:05"), line, suffix)
	return err
}

func (c *decisionConsole) Sync() error { return c.next.Sync() }

// summarize is the console line of a decision, and false for a routine
// Allow. A person wants to see what the proxy refused, would refuse in
// shadow mode, warned about, failed on, and the once approvals it used up.
func summarize(f map[string]any) (string, bool) {
	str := func(k string) string { s, _ := f[k].(string); return s }
	flag := func(k string) bool { b, _ := f[k].(bool); return b }
	var label, why string
	switch {
	case str("decision") == decisionlog.DecisionError:
		label, why = "ERROR", str("error")
	case flag("wouldDeny"):
		label, why = "WOULD DENY (shadow)", str("category")
	case str("decision") == "Deny":
		label, why = "DENY", str("category")
	case str("approvalMode") == "once":
		label, why = "APPROVED ONCE", "used "+str("approval")+" on "+str("parent")
	default:
		ws, _ := f["warnings"].([]any)
		if len(ws) == 0 {
			return "", false
		}
		label, why = "WARNING", fmt.Sprint(ws[0])
		if len(ws) > 1 {
			why += fmt.Sprintf(" (and %d more)", len(ws)-1)
		}
	}
	object := str("resource")
	if g := str("group"); g != "" {
		object += "." + g
	}
	object += " "
	if ns := str("namespace"); ns != "" {
		object += ns + "/"
	}
	object += str("name")
	if flag("dryRun") {
		label += " (dry run)"
	}
	// The decision's reason is in the JSON file and in kubectl kausality
	// drifts; a console line stays short.
	if p := str("parent"); p != "" && !strings.HasPrefix(label, "APPROVED") {
		why += " (parent " + p + ")"
	}
	user := strings.TrimPrefix(str("user"), "system:serviceaccount:")
	// Names and reasons come from requests and annotations.
	return annotations.PrintableLines(fmt.Sprintf("%s %s %s by %s: %s", label, str("verb"), object, user, why)), true
}
