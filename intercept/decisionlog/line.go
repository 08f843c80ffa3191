// Package decisionlog defines the one line the proxy logs for every
// intercepted write: its fields, how they are written (as zap fields of
// the proxy's JSON log) and how tools read them back (the shadow report,
// tests). Pure: no I/O.
package decisionlog

import (
	"reflect"
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
//
// The struct is the line's schema: each field's json tag names it, the
// fields are written in the struct's order, and the log tag says when a
// field is written: "omitempty" leaves out its zero value, "if=Other" writes
// it only when the field Other is set (a true bool, a non-empty string).
// Fields without a log tag are on every line; json "-" fields are not
// written unless their log tag names them ("name=...").
type Line struct {
	User         string `json:"user"`
	FieldManager string `json:"fieldManager"`
	Verb         string `json:"verb"`
	Operation    string `json:"operation,omitempty" log:"if=Decided"`
	Group        string `json:"group"`
	Version      string `json:"version"`
	Resource     string `json:"resource"`
	Subresource  string `json:"subresource"`
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`

	// Decided is false for lines of writes answered with an error
	// (Decision "Error"): the decision fields are then left out.
	Decided        bool   `json:"-"`
	DesiredChanged bool   `json:"desiredChanged,omitempty" log:"if=Decided"`
	Decision       string `json:"decision"`
	Category       string `json:"category,omitempty" log:"if=Decided"`
	Reason         string `json:"reason,omitempty" log:"if=Decided"`
	Drift          bool   `json:"drift,omitempty" log:"if=Decided"`
	DryRun         bool   `json:"dryRun,omitempty" log:"if=Decided"`
	// Confirmed: the verdict was decided on kube-apiserver's own result
	// (a live read and a dry run), not on the proxy's computation.
	Confirmed  bool   `json:"confirmed,omitempty" log:"if=Decided"`
	Shadow     bool   `json:"shadow"`
	WouldDeny  bool   `json:"wouldDeny,omitempty" log:"if=Decided"`
	Controller string `json:"controller"`
	Snoozed    bool   `json:"snoozed,omitempty" log:"if=Decided"`
	Outcome    string `json:"outcome"`
	// Latency is in seconds in the proxy's log. encoding/json cannot read
	// seconds back into a Duration, so readers skip it and the log tag
	// names it.
	Latency time.Duration `json:"-" log:"name=latency"`

	Mode       string `json:"mode,omitempty" log:"omitempty"`
	ModeSource string `json:"modeSource,omitempty" log:"if=Mode"`

	// Parent fields are written only when the write has a parent, zero
	// generations included.
	Parent                   string `json:"parent,omitempty" log:"omitempty"`
	ParentGeneration         int64  `json:"parentGeneration,omitempty" log:"if=Parent"`
	ParentObservedGeneration int64  `json:"parentObservedGeneration,omitempty" log:"if=Parent"`
	LifecyclePhase           string `json:"lifecyclePhase,omitempty" log:"if=Parent"`
	ParentSource             string `json:"parentSource,omitempty" log:"if=Parent"`
	IsController             bool   `json:"isController,omitempty" log:"if=Parent"`
	ControllerDetermined     bool   `json:"controllerDetermined,omitempty" log:"if=Parent"`
	ControllerMethod         string `json:"controllerMethod,omitempty" log:"if=Parent"`

	Approval     string `json:"approval,omitempty" log:"omitempty"`
	ApprovalMode string `json:"approvalMode,omitempty" log:"if=Approval"`
	Rejection    string `json:"rejection,omitempty" log:"omitempty"`
	// ApprovalsSetAside counts the parent's approvals its own controller
	// gave, which do not approve its drift.
	ApprovalsSetAside int `json:"approvalsSetAside,omitempty" log:"omitempty"`
	// Policy names the ApprovalPolicy rule that matched ("ApprovalPolicy
	// ns/name rule 0"), or is PolicyNone for drift no rule matched.
	Policy string `json:"policy,omitempty" log:"omitempty"`

	// Allowance fields are written only when allowances apply to the
	// write (its allowance mode is not off).
	AllowanceMode string `json:"allowanceMode,omitempty" log:"omitempty"`
	// AllowanceJustified: "mutation <- policy (initiator, first hop)" per
	// justified mutation; AllowanceViolations the mutations nothing
	// allowed; AllowanceGranted the policies whose allowances the write
	// adds; AllowancePruned the consumed allowances it drops.
	AllowanceJustified  []string `json:"allowanceJustified,omitempty" log:"if=AllowanceMode,omitempty"`
	AllowanceViolations []string `json:"allowanceViolations,omitempty" log:"if=AllowanceMode,omitempty"`
	AllowanceGranted    []string `json:"allowanceGranted,omitempty" log:"if=AllowanceMode,omitempty"`
	AllowancePruned     int      `json:"allowancePruned,omitempty" log:"if=AllowanceMode,omitempty"`
	AllowanceUnfinished string   `json:"allowanceUnfinished,omitempty" log:"if=AllowanceMode,omitempty"`

	HasTrace    bool `json:"-"`
	TraceHops   int  `json:"traceHops,omitempty" log:"if=HasTrace"`
	TraceOrigin bool `json:"traceOrigin,omitempty" log:"if=HasTrace"`

	// ChangedPaths are the paths of the changed fields (ChangedPaths),
	// never their values: for a Secret they name its keys only.
	ChangedPaths []string `json:"changedPaths,omitempty" log:"omitempty"`
	// Warnings are the decision's; those built from the changes show no
	// value of a Secret (see decision's shownChanges).
	Warnings []string `json:"warnings,omitempty" log:"omitempty"`
	Error    string   `json:"error,omitempty" log:"omitempty"`
}

// linePlan is how MarshalLogObject writes a Line, read once from its tags.
var linePlan = mustPlanFields(reflect.TypeFor[Line]())

// MarshalLogObject writes the line as zap fields.
func (l *Line) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	linePlan.marshal(enc, reflect.ValueOf(l).Elem())
	return nil
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
