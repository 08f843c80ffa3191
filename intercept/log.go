// Recording a decided write: its decision line and its metrics.

package intercept

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/decisionlog"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/sidewrites"
	"github.com/kausality-io/kausality-proxy/internal/seriesmemo"
)

// DecisionMessage is the message of every decision line, so that tools can
// select them from the proxy's log.
const DecisionMessage = decisionlog.Message

// recordDecision records a decided write: its decision line, its metrics,
// and the kind of parent it makes the proxy watch.
func (i *Interceptor) recordDecision(f *facts, d *decision.Decision, outcome string) {
	i.watchParentKind(f, d)
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
	line.WouldDeny = f.req.shadow && d.Result == decision.Deny
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
	line.ApprovalsSetAside = d.ApprovalsSetAside
	switch {
	case d.Policy != nil:
		line.Policy = d.Policy.String()
	case d.Drift:
		line.Policy = decisionlog.PolicyNone
	}
	if len(d.PolicyProblems) > 0 && i.cfg.Policies != nil {
		i.cfg.Policies.Report(d.PolicyProblems)
	}
	i.allowanceFields(line, d)
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
		Shadow:       rq.shadow,
		Controller:   rq.controllerName,
		Outcome:      outcome,
		Latency:      latency,
	}
}

// metrics of the write path. Label values are bounded: decisions,
// categories and modes are enums, controllers are the names in the config
// file, resources are the cluster's API resources. No object names, no
// users.
type metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	// reservations counts once approvals reserved for a write by what
	// became of them.
	reservations *prometheus.CounterVec
	// decided holds the series of decisions and latency each combination
	// of labels resolved to. As bounded as the labels.
	decided *seriesmemo.Memo[decidedLabels, *decidedSeries]
}

// decidedLabels are the label values of one write's decision series.
type decidedLabels struct {
	result, category, mode, controller, group, resource string
	shadow                                              bool
}

type decidedSeries struct {
	decisions prometheus.Counter
	latency   prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kausality_proxy_decisions_total",
			Help: "Decisions about intercepted writes, by result, category, mode, configured controller, resource and whether the controller is in shadow mode.",
		}, []string{"decision", "category", "mode", "controller", "resource", "shadow"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kausality_proxy_decision_duration_seconds",
			Help:    "Time from receiving an intercepted write to its decision line (forwarding included), by category.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"category", "shadow"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kausality_proxy_intercept_errors_total",
			Help: "Intercepted writes the proxy answered with an error of its own (bad body, unreadable parent, ...), by HTTP code.",
		}, []string{"code", "shadow"}),
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kausality_proxy_once_approvals_total",
			Help: "Once approvals reserved for a write, by outcome: used (the write was applied), restored (it was not, and the approval is back on the parent), kept (the write got no clear answer and may have been applied), unsettled (kube-apiserver could not be read in time to tell), restore-failed.",
		}, []string{"outcome"}),
	}
	m.decided = seriesmemo.New(m.resolveDecided)
	if reg != nil {
		reg.MustRegister(m.decisions, m.latency, m.errors, m.reservations)
	}
	return m
}

// registerUnservedKindsGauge exports how many kinds the config file names
// that kube-apiserver does not serve (config.KindChecker).
func registerUnservedKindsGauge(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kausality_proxy_config_unserved_kinds",
		Help: "Kinds the config file names (ungatedChildKinds, lifecycle, unboundStatusRecordDelays) that kube-apiserver does not serve: entries that match nothing. The log names each.",
	})
	if reg != nil {
		reg.MustRegister(g)
	}
	return g
}

// registerDeferredMetrics exports how many deferred status records wait
// and how many were dropped at the bound (sidewrites.Deferred).
func registerDeferredMetrics(reg prometheus.Registerer, d *sidewrites.Deferred) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kausality_proxy_deferred_status_records",
			Help: "Observed-generation records of status writes that named no resourceVersion, waiting out --unbound-status-record-delay in this replica.",
		}, func() float64 { return float64(d.Waiting()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kausality_proxy_deferred_status_records_dropped_total",
			Help: "Deferred observed-generation records dropped because too many were waiting; each parent stays unsettled until a later status write.",
		}, func() float64 { return float64(d.Dropped()) }),
	)
}

// registerCacheMetrics exports the caches store holds
// (objects.CachesCollector).
func registerCacheMetrics(reg prometheus.Registerer, store *objects.Store) {
	if reg != nil && store != nil {
		reg.MustRegister(objects.CachesCollector(store))
	}
}

func (m *metrics) observe(rq *writeRequest, d *decision.Decision, elapsed time.Duration) {
	if m == nil {
		return
	}
	series := m.decided.For(decidedLabels{result: string(d.Result), category: string(d.Category), mode: string(d.Mode),
		controller: rq.controllerName, group: rq.w.gvr.Group, resource: rq.w.gvr.Resource, shadow: rq.shadow})
	series.decisions.Inc()
	series.latency.Observe(elapsed.Seconds())
}

func (m *metrics) resolveDecided(l decidedLabels) *decidedSeries {
	resource := l.resource
	if l.group != "" {
		resource = l.group + "/" + resource
	}
	shadow := strconv.FormatBool(l.shadow)
	return &decidedSeries{
		decisions: m.decisions.WithLabelValues(l.result, l.category, l.mode, l.controller, resource, shadow),
		latency:   m.latency.WithLabelValues(l.category, shadow),
	}
}

func (m *metrics) observeError(rq *writeRequest, err error) {
	if m == nil {
		return
	}
	code := "500"
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code = strconv.Itoa(int(status.Status().Code))
	}
	m.errors.WithLabelValues(code, strconv.FormatBool(rq.shadow)).Inc()
}

func (m *metrics) reservation(outcome string) {
	if m == nil {
		return
	}
	m.reservations.WithLabelValues(outcome).Inc()
}

// allowanceFields fills the line's allowance fields, and hands the
// problems evaluations ran into to the policies' status.
func (i *Interceptor) allowanceFields(line *decisionlog.Line, d *decision.Decision) {
	a := d.Allowances
	if a == nil {
		return
	}
	line.AllowanceMode = string(a.Mode)
	for _, j := range a.Justification {
		just := j.Mutation + " <- " + j.By.Policy + " (" + j.By.Initiator
		if len(j.By.Trace) > 0 {
			h := j.By.Trace[0]
			just += ", " + h.Kind + "/" + h.Name + " " + h.Field
		}
		line.AllowanceJustified = append(line.AllowanceJustified, just+")")
	}
	for _, v := range a.Violations {
		line.AllowanceViolations = append(line.AllowanceViolations, v.Mutation)
	}
	line.AllowanceGranted, line.AllowancePruned, line.AllowanceUnfinished = a.Granted, a.Pruned, a.Unfinished
	if len(a.Problems) > 0 && i.cfg.AllowancePolicies != nil {
		i.cfg.AllowancePolicies.Report(a.Problems)
	}
}
