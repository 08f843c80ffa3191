package intercept

import (
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/decisionlog"
)

// DecisionMessage is the message of every decision line, so that tools can
// select them from the proxy's log.
const DecisionMessage = decisionlog.Message

// recordDecision records a decided write: its decision line and its
// metrics.
func (i *Interceptor) recordDecision(f *facts, d *decision.Decision, outcome string) {
	line := f.line(d.Actor.User, d.Child.Name, outcome, i.cfg.Clock.Since(f.req.start))
	line.Decided = true
	line.Operation = string(f.op)
	line.DesiredChanged = f.changed
	line.Decision = string(d.Result)
	line.Category = string(d.Category)
	line.Reason = d.Reason
	line.Drift = d.Drift
	line.DryRun = f.dryRun
	line.Confirmed = f.confirmed
	line.WouldDeny = f.req.shadow() && d.Result == decision.Deny
	line.Snoozed = d.Snooze.Snoozed
	line.Mode, line.ModeSource = string(d.Mode), string(d.ModeSource)
	if d.Parent != nil {
		line.Parent = d.Parent.Ref.String()
		line.ParentGeneration = d.Parent.Generation
		line.ParentObservedGeneration = d.Parent.ObservedGeneration
		line.LifecyclePhase = string(d.Parent.Phase)
		line.ParentSource = f.parent.source
		line.IsController = d.Actor.IsController
		line.ControllerDetermined = d.Actor.Determined
		line.ControllerMethod = string(d.Actor.Method)
	}
	if d.Approval != nil {
		line.Approval = d.Approval.Kind + "/" + d.Approval.Name
		line.ApprovalMode = string(d.Approval.Mode)
	}
	if d.Rejection != nil {
		line.Rejection = d.Rejection.Kind + "/" + d.Rejection.Name
	}
	switch {
	case d.Policy != nil:
		line.Policy = d.Policy.String()
	case d.Drift:
		line.Policy = decisionlog.PolicyNone
	}
	if len(d.PolicyProblems) > 0 && i.cfg.Policies != nil {
		i.cfg.Policies.Report(d.PolicyProblems)
	}
	if d.Trace != "" {
		line.HasTrace = true
		line.TraceHops = strings.Count(d.Trace, `"kind"`)
		line.TraceOrigin = d.TraceOrigin
	}
	line.ChangedPaths = decisionlog.ChangedPaths(f.changes)
	line.Warnings = d.Warnings
	i.cfg.Log.Info(decisionlog.Message, zap.Inline(line))
	i.metrics.observe(f.req, d, i.cfg.Clock.Since(f.req.start))
}

// logError records a write the proxy answered with an error of its own:
// its decision line and its metrics.
func (i *Interceptor) logError(f *facts, outcome string, err error) {
	user := ""
	if f.req.user != nil {
		user = f.req.user.GetName()
	}
	line := f.line(user, f.req.w.info.Name, outcome, i.cfg.Clock.Since(f.req.start))
	line.Decision = decisionlog.DecisionError
	line.Error = err.Error()
	i.cfg.Log.Info(decisionlog.Message, zap.Inline(line))
	i.metrics.observeError(f.req, err)
}

// line fills the fields every decision line has.
func (f *facts) line(user, name, outcome string, latency time.Duration) *decisionlog.Line {
	rq := f.req
	return &decisionlog.Line{
		User:         user,
		FieldManager: rq.w.fieldManager,
		Verb:         rq.w.verb,
		Group:        rq.w.gvr.Group,
		Version:      rq.w.gvr.Version,
		Resource:     rq.w.gvr.Resource,
		Subresource:  rq.w.info.Subresource,
		Namespace:    f.namespace,
		Name:         name,
		Shadow:       rq.shadow(),
		Controller:   rq.controllerName(),
		Outcome:      outcome,
		Latency:      latency,
	}
}
