package escalation

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// Action ids of the buttons.
const (
	ActionApproveOnce       = "kausality_approve_once"
	ActionApproveGeneration = "kausality_approve_generation"
	ActionReject            = "kausality_reject"
	ActionSnooze            = "kausality_snooze_1h"
)

// snoozeFor is how long the snooze button snoozes.
const snoozeFor = time.Hour

// Block ids this package gives its blocks, so that a click can find them
// in the message it rewrites.
const (
	actionsBlockID       = "kausality_actions"
	outcomeBlockIDPrefix = "kausality_outcome_"
)

// Slack's limits (Block Kit reference).
const (
	maxButtonValue = 2000
	maxHeaderText  = 150
	maxFieldText   = 2000
	maxSectionText = 3000
)

// Bounds of what a message shows; the DriftReport webhook carries all of it.
const (
	maxChangeLines = 25
	maxTraceHops   = 10
	// maxOutcomes keeps a message under Slack's 50 blocks however often
	// someone snoozes it.
	maxOutcomes = 10
)

// buttonValue is what a button carries back to the interaction handler:
// the drift id, and nothing else. What a click acts on is read from the
// drift's open record, never taken from the click, so a signed click with
// made-up references can do nothing.
type buttonValue struct {
	DriftID string `json:"d"`
}

func (v buttonValue) encode() (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// decodeButtonValue reads the drift id of a button. Messages posted
// before buttons carried only the id also name objects; those are ignored.
func decodeButtonValue(s string) (buttonValue, error) {
	var v buttonValue
	if len(s) > maxButtonValue {
		return v, errors.New("button value exceeds Slack's 2000 characters")
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return v, fmt.Errorf("button value: %w", err)
	}
	if v.DriftID == "" {
		return v, errors.New("button value: a drift id is required")
	}
	return v, nil
}

// detectedBlocks is the message of a detected drift: what happened and
// the buttons to answer it.
func detectedBlocks(r v1alpha1.DriftReport) []slack.Block {
	s := r.Spec
	header := fmt.Sprintf("Drift: %s %s changed by the controller of %s %s", s.Child.Kind, s.Child.Name, s.Parent.Kind, s.Parent.Name)
	blocks := append([]slack.Block{plainHeader(header)}, describe(r)...)
	value, err := buttonValue{DriftID: s.ID}.encode()
	if err != nil {
		return blocks
	}
	return append(blocks, actionsBlock(value))
}

func actionsBlock(value string) *slack.ActionBlock {
	button := func(id, label string) *slack.ButtonBlockElement {
		return slack.NewButtonBlockElement(id, value, slack.NewTextBlockObject(slack.PlainTextType, label, false, false))
	}
	reject := button(ActionReject, "Reject").WithStyle(slack.StyleDanger).WithConfirm(slack.NewConfirmationBlockObject(
		slack.NewTextBlockObject(slack.PlainTextType, "Reject this drift?", false, false),
		slack.NewTextBlockObject(slack.MarkdownType, "The proxy will deny this controller's writes to the child until the rejection is removed from kausality.io/rejections.", false, false),
		slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false),
		slack.NewTextBlockObject(slack.PlainTextType, "Cancel", false, false)))
	return slack.NewActionBlock(actionsBlockID,
		button(ActionApproveOnce, "Approve once").WithStyle(slack.StylePrimary),
		button(ActionApproveGeneration, "Approve for this generation"),
		reject,
		button(ActionSnooze, "Snooze 1h"))
}

// resolvedBlocks is the message of a resolved drift: no buttons.
func resolvedBlocks(r v1alpha1.DriftReport) []slack.Block {
	s := r.Spec
	header := fmt.Sprintf("Drift resolved: %s %s of %s %s", s.Child.Kind, s.Child.Name, s.Parent.Kind, s.Parent.Name)
	blocks := []slack.Block{plainHeader(header), section(":white_check_mark: *Resolved:* " + escape(resolutionText(s.Reason)))}
	return append(blocks, describe(r)...)
}

func resolutionText(reason string) string {
	switch reason {
	case v1alpha1.ReasonApproved:
		return "an approval on the parent now allows the write."
	case v1alpha1.ReasonParentChanged:
		return "the parent's spec changed (its generation moved on), so the write is no longer drift."
	case v1alpha1.ReasonChildDeleted:
		return "the child was deleted."
	case "":
		return "the drift is gone."
	}
	return reason
}

// describe renders the parts of a drift both messages show: the objects,
// the writer, the changes and the trace.
func describe(r v1alpha1.DriftReport) []slack.Block {
	s := r.Spec
	parent := fmt.Sprintf("*Parent*\n`%s`\ngeneration %d (observed %d)", code(notify.ParentObject(s.Parent).String()), s.Parent.Generation, s.Parent.ObservedGeneration)
	child := fmt.Sprintf("*Child*\n`%s`", code(notify.ChildObject(s.Child).String()))
	if s.Child.Generation != 0 {
		child += fmt.Sprintf("\ngeneration %d", s.Child.Generation)
	}
	writer := fmt.Sprintf("*Written by*\n`%s`", code(orDash(s.Request.User)))
	var how []string
	if s.Request.Operation != "" {
		how = append(how, s.Request.Operation)
	}
	if s.Request.FieldManager != "" {
		how = append(how, "field manager `"+code(s.Request.FieldManager)+"`")
	}
	if len(how) > 0 {
		writer += "\n" + strings.Join(how, ", ")
	}
	id := fmt.Sprintf("*Drift id*\n`%s`", code(orDash(s.ID)))
	fields := []*slack.TextBlockObject{mrkdwn(parent), mrkdwn(child), mrkdwn(writer), mrkdwn(id)}
	for _, f := range fields {
		f.Text = truncate(f.Text, maxFieldText)
	}
	blocks := []slack.Block{slack.NewSectionBlock(nil, fields, nil)}
	blocks = append(blocks, section(changesText(r)))
	if a := allowancesText(r); a != "" {
		blocks = append(blocks, section(a))
	}
	if t := traceText(r); t != "" {
		blocks = append(blocks, section(t))
	}
	return blocks
}

// changesText renders the desired-state diff, old → new per field. The
// values of a Secret's data and stringData are never rendered, whatever
// the report holds: reports are redacted when they are made, and this
// keeps a message safe from a report that was not.
func changesText(r v1alpha1.DriftReport) string {
	const title = "*Desired-state changes*\n"
	if len(r.Spec.Changes) == 0 {
		return title + "_none recorded_"
	}
	secret := reportsSecret(r)
	var lines []string
	used := len(title) + len("```\n```") + 40 // room for the "more" line
	for i, c := range r.Spec.Changes {
		line := changeLine(c, secret)
		if i == maxChangeLines || used+len(line)+1 > maxSectionText {
			lines = append(lines, fmt.Sprintf("… and %d more", len(r.Spec.Changes)-i))
			break
		}
		used += len(line) + 1
		lines = append(lines, line)
	}
	return title + "```\n" + strings.Join(lines, "\n") + "\n```"
}

// allowancesText renders the mutations no allowance covered, each with
// the allowance it needed; "" when the report has none.
func allowancesText(r v1alpha1.DriftReport) string {
	a := r.Spec.Allowances
	if a == nil {
		return ""
	}
	title := "*Not allowed (allowance-mode " + escape(a.Mode) + ")*: the parent carries no allowance for\n"
	tail := "An approval does not grant an allowance: a change of the parent by someone an AllowancePolicy lets initiate it does."
	var lines []string
	used := len(title) + len(tail) + len("```\n```\n") + 40
	for i, v := range a.Violations {
		line := code(v.Field) + ": needs {kind: " + code(v.NeededKind) + ", mutation: " + code(v.NeededMutation) + "}"
		if i == maxChangeLines || used+len(line)+1 > maxSectionText {
			lines = append(lines, fmt.Sprintf("… and %d more", len(a.Violations)-i))
			break
		}
		used += len(line) + 1
		lines = append(lines, line)
	}
	return title + "```\n" + strings.Join(lines, "\n") + "\n```\n" + tail
}

func changeLine(c desired.Change, secret bool) string {
	path := code(c.Path)
	switch {
	case secret && secretDataPath(c.Path):
		return path + ": (value hidden)"
	case c.Old == "" && c.New == "":
		return path + ": changed"
	}
	return path + ": " + code(orDash(c.Old)) + " → " + code(orDash(c.New))
}

// reportsSecret reports whether the report is about a Secret, by its
// child reference or by either object.
func reportsSecret(r v1alpha1.DriftReport) bool {
	s := r.Spec
	if isSecret(s.Child.APIVersion, s.Child.Kind) {
		return true
	}
	for _, o := range []runtime.RawExtension{s.OldObject, s.NewObject} {
		if u := notify.ObjectOf(o); u != nil && isSecret(u.GetAPIVersion(), u.GetKind()) {
			return true
		}
	}
	return false
}

func isSecret(apiVersion, kind string) bool { return apiVersion == "v1" && kind == "Secret" }

// secretDataPath reports whether a change path ("data", "data.key",
// `data["a.b"]`) is under data or stringData.
func secretDataPath(path string) bool {
	for _, top := range [...]string{"data", "stringData"} {
		if rest, ok := strings.CutPrefix(path, top); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return true
		}
	}
	return false
}

// traceText renders the causal chain of the child from its trace
// annotation: the new object's, or the old one's on DELETE. "" when there
// is none.
func traceText(r v1alpha1.DriftReport) string {
	var t trace.Trace
	for _, o := range []runtime.RawExtension{r.Spec.NewObject, r.Spec.OldObject} {
		u := notify.ObjectOf(o)
		if u == nil {
			continue
		}
		if v := u.GetAnnotations()[annotations.Trace]; v != "" {
			if parsed, err := trace.Parse(v); err == nil && len(parsed) > 0 {
				t = parsed
				break
			}
		}
	}
	if len(t) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("*Trace*")
	first := 0
	if len(t) > maxTraceHops {
		first = len(t) - maxTraceHops
		fmt.Fprintf(&b, "\n… %d earlier hops", first)
	}
	for i := first; i < len(t); i++ {
		h := t[i]
		fmt.Fprintf(&b, "\n%d. `%s %s %s` generation %d by `%s`", i+1, code(h.APIVersion), code(h.Kind), code(h.Name), h.Generation, code(orDash(h.User)))
		if !h.Timestamp.IsZero() {
			b.WriteString(" at " + h.Timestamp.UTC().Format(time.RFC3339))
		}
	}
	return truncate(b.String(), maxSectionText)
}

func fallbackText(r v1alpha1.DriftReport) string {
	s := r.Spec
	return escape(fmt.Sprintf("Drift %s: %s written by the controller of %s", s.ID, notify.ChildObject(s.Child), notify.ParentObject(s.Parent)))
}

// clickedBlocks rewrites a message after a click: the blocks as Slack
// sent them back, the outcome added, and the buttons dropped when the
// drift is answered. When the message did not come back, a short one
// from the open drift stands in.
func clickedBlocks(original []slack.Block, d OpenDrift, outcome string, keepButtons bool) []slack.Block {
	if len(original) == 0 {
		original = []slack.Block{section(fmt.Sprintf("Drift `%s`: `%s` written by the controller of `%s`",
			code(d.ID), code(d.Child.String()), code(d.Parent.String())))}
		if value, err := (buttonValue{DriftID: d.ID}).encode(); err == nil {
			original = append(original, actionsBlock(value))
		}
	}
	var body, outcomes []slack.Block
	var actions slack.Block
	for _, b := range original {
		switch id := b.ID(); {
		case id == actionsBlockID:
			actions = b
		case strings.HasPrefix(id, outcomeBlockIDPrefix):
			outcomes = append(outcomes, b)
		default:
			body = append(body, b)
		}
	}
	// The ids only need to be unique within the message: count on from
	// the highest it has.
	next := 0
	for _, b := range outcomes {
		if n, err := strconv.Atoi(strings.TrimPrefix(b.ID(), outcomeBlockIDPrefix)); err == nil && n >= next {
			next = n + 1
		}
	}
	if len(outcomes) >= maxOutcomes {
		outcomes = outcomes[len(outcomes)-maxOutcomes+1:]
	}
	outcomes = append(outcomes, slack.NewContextBlock(fmt.Sprintf("%s%d", outcomeBlockIDPrefix, next), mrkdwn(truncate(outcome, maxFieldText))))
	blocks := append(body, outcomes...)
	if keepButtons && actions != nil {
		blocks = append(blocks, actions)
	}
	return blocks
}

func plainHeader(text string) *slack.HeaderBlock {
	return slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, truncate(text, maxHeaderText), false, false))
}

func section(text string) *slack.SectionBlock {
	return slack.NewSectionBlock(mrkdwn(truncate(text, maxSectionText)), nil, nil)
}

func mrkdwn(text string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, text, false, false)
}

// escape makes text literal in Slack markup: <, > and & would otherwise
// make links and mentions (<!channel>) out of object names and values,
// which the writer of the object controls.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// code escapes text for a `code` span or a ``` block: a backquote in it
// would end the span and let the rest be read as markup.
func code(s string) string { return strings.ReplaceAll(escape(s), "`", "'") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate bounds s to n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
