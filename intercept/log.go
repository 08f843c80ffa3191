package intercept

import (
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// DecisionMessage is the message of every decision line, so that tools can
// select them from the proxy's log.
const DecisionMessage = "kausality decision"

// recordDecision records a decided write: the one log line it produces and
// its metrics. The line never contains request bodies, tokens or other
// secrets: only names, generations and the decision.
func (i *Interceptor) recordDecision(p *pending, d *decision.Decision) {
	fields := []zap.Field{
		zap.String("user", d.Actor.User),
		zap.String("fieldManager", p.w.fieldManager),
		zap.String("verb", p.w.verb),
		zap.String("operation", string(p.w.op)),
		zap.String("group", p.w.gvr.Group),
		zap.String("version", p.w.gvr.Version),
		zap.String("resource", p.w.gvr.Resource),
		zap.String("subresource", p.w.info.Subresource),
		zap.String("namespace", p.w.namespace),
		zap.String("name", d.Child.Name),
		zap.Bool("desiredChanged", p.changed),
		zap.String("decision", string(d.Result)),
		zap.String("category", string(d.Category)),
		zap.String("reason", d.Reason),
		zap.Bool("drift", d.Drift),
		zap.Bool("dryRun", p.w.dryRun),
		zap.Bool("shadow", p.shadow()),
		zap.Bool("wouldDeny", p.shadow() && d.Result == decision.Deny),
		zap.String("controller", p.controllerName()),
		zap.Bool("snoozed", d.Snooze.Snoozed),
		zap.String("outcome", p.outcome),
		zap.Duration("latency", time.Since(p.start)),
	}
	if d.Mode != "" {
		fields = append(fields, zap.String("mode", string(d.Mode)), zap.String("modeSource", string(d.ModeSource)))
	}
	if d.Parent != nil {
		fields = append(fields,
			zap.String("parent", d.Parent.Ref.String()),
			zap.Int64("parentGeneration", d.Parent.Generation),
			zap.Int64("parentObservedGeneration", d.Parent.ObservedGeneration),
			zap.String("lifecyclePhase", string(d.Parent.Phase)),
			zap.String("parentSource", p.parentSource),
			zap.Bool("isController", d.Actor.IsController),
			zap.Bool("controllerDetermined", d.Actor.Determined),
			zap.String("controllerMethod", string(d.Actor.Method)),
		)
	}
	if d.Approval != nil {
		fields = append(fields, zap.String("approval", d.Approval.Kind+"/"+d.Approval.Name), zap.String("approvalMode", string(d.Approval.Mode)))
	}
	if d.Rejection != nil {
		fields = append(fields, zap.String("rejection", d.Rejection.Kind+"/"+d.Rejection.Name))
	}
	if d.Trace != "" {
		fields = append(fields, zap.Int("traceHops", strings.Count(d.Trace, `"kind"`)), zap.Bool("traceOrigin", d.TraceOrigin))
	}
	if len(p.changes) > 0 {
		paths := make([]string, 0, len(p.changes))
		for _, c := range p.changes {
			paths = append(paths, c.Path)
		}
		fields = append(fields, zap.Strings("changedPaths", paths))
	}
	if len(d.Warnings) > 0 {
		fields = append(fields, zap.Strings("warnings", d.Warnings))
	}
	i.cfg.Log.Info(DecisionMessage, fields...)
	i.metrics.observe(p, d)
}

// logError records a write the proxy answered with an error of its own:
// its log line and its metrics.
func (i *Interceptor) logError(r *http.Request, p *pending, err error) {
	user := ""
	if u, ok := request.UserFrom(r.Context()); ok {
		user = u.GetName()
	}
	i.cfg.Log.Info(DecisionMessage,
		zap.String("user", user),
		zap.String("fieldManager", p.w.fieldManager),
		zap.String("verb", p.w.verb),
		zap.String("group", p.w.gvr.Group),
		zap.String("version", p.w.gvr.Version),
		zap.String("resource", p.w.gvr.Resource),
		zap.String("subresource", p.w.info.Subresource),
		zap.String("namespace", p.w.namespace),
		zap.String("name", p.w.info.Name),
		zap.String("decision", "Error"),
		zap.Bool("shadow", p.shadow()),
		zap.String("controller", p.controllerName()),
		zap.String("outcome", p.outcome),
		zap.Duration("latency", time.Since(p.start)),
		zap.Error(err),
	)
	i.metrics.observeError(p, err)
}
