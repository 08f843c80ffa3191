// Package decisionlog defines the one line the proxy logs for every
// intercepted write: its fields, how they are written (as zap fields of
// the proxy's JSON log) and how tools read them back (the shadow report,
// tests). Pure: no I/O.
package decisionlog

import (
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// Message is the msg of every decision line, so that tools can select them
// from the proxy's log.
const Message = "kausality decision"

// PolicyNone is the policy field of a drift line no ApprovalPolicy rule
// matched.
const PolicyNone = "none"

// DecisionError is the Decision of a write the proxy answered with an error
// of its own before deciding.
const DecisionError = "Error"

// Line is one decision line. It never holds request bodies, tokens or other
// secrets: only names, generations and the decision. Fields that do not
// apply to a write are left out of the line.
type Line struct {
	User         string `json:"user"`
	FieldManager string `json:"fieldManager"`
	Verb         string `json:"verb"`
	Operation    string `json:"operation,omitempty"`
	Group        string `json:"group"`
	Version      string `json:"version"`
	Resource     string `json:"resource"`
	Subresource  string `json:"subresource"`
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`

	// Decided is false for lines of writes answered with an error
	// (Decision "Error"): the decision fields below are then left out.
	Decided        bool   `json:"-"`
	DesiredChanged bool   `json:"desiredChanged,omitempty"`
	Decision       string `json:"decision"`
	Category       string `json:"category,omitempty"`
	Reason         string `json:"reason,omitempty"`
	Drift          bool   `json:"drift,omitempty"`
	DryRun         bool   `json:"dryRun,omitempty"`
	// Confirmed: the verdict was decided on kube-apiserver's own result
	// (a live read and a dry run), not on the proxy's computation.
	Confirmed  bool   `json:"confirmed,omitempty"`
	Shadow     bool   `json:"shadow"`
	WouldDeny  bool   `json:"wouldDeny,omitempty"`
	Controller string `json:"controller"`
	Snoozed    bool   `json:"snoozed,omitempty"`
	Outcome    string `json:"outcome"`
	// Latency is in seconds in the JSON log.
	Latency time.Duration `json:"-"`

	Mode       string `json:"mode,omitempty"`
	ModeSource string `json:"modeSource,omitempty"`

	// Parent fields are written only when the write has a parent.
	Parent                   string `json:"parent,omitempty"`
	ParentGeneration         int64  `json:"parentGeneration,omitempty"`
	ParentObservedGeneration int64  `json:"parentObservedGeneration,omitempty"`
	LifecyclePhase           string `json:"lifecyclePhase,omitempty"`
	ParentSource             string `json:"parentSource,omitempty"`
	IsController             bool   `json:"isController,omitempty"`
	ControllerDetermined     bool   `json:"controllerDetermined,omitempty"`
	ControllerMethod         string `json:"controllerMethod,omitempty"`

	Approval     string `json:"approval,omitempty"`
	ApprovalMode string `json:"approvalMode,omitempty"`
	Rejection    string `json:"rejection,omitempty"`
	// Policy names the ApprovalPolicy rule that matched ("ApprovalPolicy
	// ns/name rule 0"), or is PolicyNone for drift no rule matched.
	Policy string `json:"policy,omitempty"`

	// Allowance fields are written only when allowances apply to the
	// write (its allowance mode is not off).
	AllowanceMode string `json:"allowanceMode,omitempty"`
	// AllowanceJustified: "mutation <- policy (initiator, first hop)" per
	// justified mutation; AllowanceViolations the mutations nothing
	// allowed; AllowanceGranted the policies whose allowances the write
	// adds; AllowancePruned the consumed allowances it drops.
	AllowanceJustified  []string `json:"allowanceJustified,omitempty"`
	AllowanceViolations []string `json:"allowanceViolations,omitempty"`
	AllowanceGranted    []string `json:"allowanceGranted,omitempty"`
	AllowancePruned     int      `json:"allowancePruned,omitempty"`
	AllowanceUnfinished string   `json:"allowanceUnfinished,omitempty"`

	HasTrace    bool `json:"-"`
	TraceHops   int  `json:"traceHops,omitempty"`
	TraceOrigin bool `json:"traceOrigin,omitempty"`

	// ChangedPaths are the paths of the changed fields (ChangedPaths),
	// never their values: for a Secret they name its keys only.
	ChangedPaths []string `json:"changedPaths,omitempty"`
	// Warnings are the decision's; those built from the changes show no
	// value of a Secret (see decision's shownChanges).
	Warnings []string `json:"warnings,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// MarshalLogObject writes the line as zap fields.
//
//nolint:funlen // one field of the log line per statement; the line's schema reads best in one place
func (l *Line) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("user", l.User)
	enc.AddString("fieldManager", l.FieldManager)
	enc.AddString("verb", l.Verb)
	if l.Decided {
		enc.AddString("operation", l.Operation)
	}
	enc.AddString("group", l.Group)
	enc.AddString("version", l.Version)
	enc.AddString("resource", l.Resource)
	enc.AddString("subresource", l.Subresource)
	enc.AddString("namespace", l.Namespace)
	enc.AddString("name", l.Name)
	if l.Decided {
		enc.AddBool("desiredChanged", l.DesiredChanged)
	}
	enc.AddString("decision", l.Decision)
	if l.Decided {
		enc.AddString("category", l.Category)
		enc.AddString("reason", l.Reason)
		enc.AddBool("drift", l.Drift)
		enc.AddBool("dryRun", l.DryRun)
		enc.AddBool("confirmed", l.Confirmed)
	}
	enc.AddBool("shadow", l.Shadow)
	if l.Decided {
		enc.AddBool("wouldDeny", l.WouldDeny)
	}
	enc.AddString("controller", l.Controller)
	if l.Decided {
		enc.AddBool("snoozed", l.Snoozed)
	}
	enc.AddString("outcome", l.Outcome)
	enc.AddDuration("latency", l.Latency)
	if l.Mode != "" {
		enc.AddString("mode", l.Mode)
		enc.AddString("modeSource", l.ModeSource)
	}
	if l.Parent != "" {
		enc.AddString("parent", l.Parent)
		enc.AddInt64("parentGeneration", l.ParentGeneration)
		enc.AddInt64("parentObservedGeneration", l.ParentObservedGeneration)
		enc.AddString("lifecyclePhase", l.LifecyclePhase)
		enc.AddString("parentSource", l.ParentSource)
		enc.AddBool("isController", l.IsController)
		enc.AddBool("controllerDetermined", l.ControllerDetermined)
		enc.AddString("controllerMethod", l.ControllerMethod)
	}
	if l.Approval != "" {
		enc.AddString("approval", l.Approval)
		enc.AddString("approvalMode", l.ApprovalMode)
	}
	if l.Rejection != "" {
		enc.AddString("rejection", l.Rejection)
	}
	if l.Policy != "" {
		enc.AddString("policy", l.Policy)
	}
	if l.AllowanceMode != "" {
		l.marshalAllowances(enc)
	}
	if l.HasTrace {
		enc.AddInt("traceHops", l.TraceHops)
		enc.AddBool("traceOrigin", l.TraceOrigin)
	}
	if len(l.ChangedPaths) > 0 {
		_ = enc.AddArray("changedPaths", stringArray(l.ChangedPaths))
	}
	if len(l.Warnings) > 0 {
		_ = enc.AddArray("warnings", stringArray(l.Warnings))
	}
	if l.Error != "" {
		enc.AddString("error", l.Error)
	}
	return nil
}

func (l *Line) marshalAllowances(enc zapcore.ObjectEncoder) {
	enc.AddString("allowanceMode", l.AllowanceMode)
	if len(l.AllowanceJustified) > 0 {
		_ = enc.AddArray("allowanceJustified", stringArray(l.AllowanceJustified))
	}
	if len(l.AllowanceViolations) > 0 {
		_ = enc.AddArray("allowanceViolations", stringArray(l.AllowanceViolations))
	}
	if len(l.AllowanceGranted) > 0 {
		_ = enc.AddArray("allowanceGranted", stringArray(l.AllowanceGranted))
	}
	if l.AllowancePruned > 0 {
		enc.AddInt("allowancePruned", l.AllowancePruned)
	}
	if l.AllowanceUnfinished != "" {
		enc.AddString("allowanceUnfinished", l.AllowanceUnfinished)
	}
}

// ChangedPaths are the paths of changes, for Line.ChangedPaths. The values
// stay out of the log: the decision line is read by people and tools that
// may not read the objects, Secrets least of all.
func ChangedPaths(changes []desired.Change) []string {
	if len(changes) == 0 {
		return nil
	}
	out := make([]string, len(changes))
	for i, c := range changes {
		out[i] = c.Path
	}
	return out
}

type stringArray []string

func (a stringArray) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, s := range a {
		enc.AppendString(s)
	}
	return nil
}
