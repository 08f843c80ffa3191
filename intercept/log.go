package intercept

import (
	"net/http"
	"strings"

	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/decisionlog"
)

// DecisionMessage is the message of every decision line, so that tools can
// select them from the proxy's log.
const DecisionMessage = decisionlog.Message

// recordDecision records a decided write: its decision line and its
// metrics.
func (i *Interceptor) recordDecision(p *pending, d *decision.Decision) {
	line := p.line(d.Actor.User, d.Child.Name)
	line.Decided = true
	line.Operation = string(p.op)
	line.DesiredChanged = p.changed
	line.Decision = string(d.Result)
	line.Category = string(d.Category)
	line.Reason = d.Reason
	line.Drift = d.Drift
	line.DryRun = p.w.dryRun
	line.Confirmed = p.confirmed
	line.WouldDeny = p.shadow() && d.Result == decision.Deny
	line.Snoozed = d.Snooze.Snoozed
	line.Mode, line.ModeSource = string(d.Mode), string(d.ModeSource)
	if d.Parent != nil {
		line.Parent = d.Parent.Ref.String()
		line.ParentGeneration = d.Parent.Generation
		line.ParentObservedGeneration = d.Parent.ObservedGeneration
		line.LifecyclePhase = string(d.Parent.Phase)
		line.ParentSource = p.parentSource
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
	line.ChangedPaths = decisionlog.ChangedPaths(p.changes)
	line.Warnings = d.Warnings
	i.cfg.Log.Info(decisionlog.Message, zap.Inline(line))
	i.metrics.observe(p, d)
}

// logError records a write the proxy answered with an error of its own:
// its decision line and its metrics.
func (i *Interceptor) logError(r *http.Request, p *pending, err error) {
	user := ""
	if u, ok := request.UserFrom(r.Context()); ok {
		user = u.GetName()
	}
	line := p.line(user, p.w.info.Name)
	line.Decision = decisionlog.DecisionError
	line.Error = err.Error()
	i.cfg.Log.Info(decisionlog.Message, zap.Inline(line))
	i.metrics.observeError(p, err)
}

// line fills the fields every decision line has.
func (p *pending) line(user, name string) *decisionlog.Line {
	return &decisionlog.Line{
		User:         user,
		FieldManager: p.w.fieldManager,
		Verb:         p.w.verb,
		Group:        p.w.gvr.Group,
		Version:      p.w.gvr.Version,
		Resource:     p.w.gvr.Resource,
		Subresource:  p.w.info.Subresource,
		Namespace:    p.namespace,
		Name:         name,
		Shadow:       p.shadow(),
		Controller:   p.controllerName(),
		Outcome:      p.outcome,
		Latency:      p.elapsed(),
	}
}
