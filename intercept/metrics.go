package intercept

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

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
	if reg != nil {
		reg.MustRegister(m.decisions, m.latency, m.errors, m.reservations)
	}
	return m
}

func (m *metrics) observe(rq *writeRequest, d *decision.Decision, elapsed time.Duration) {
	if m == nil {
		return
	}
	resource := rq.w.gvr.Resource
	if rq.w.gvr.Group != "" {
		resource = rq.w.gvr.Group + "/" + resource
	}
	shadow := strconv.FormatBool(rq.shadow())
	m.decisions.WithLabelValues(string(d.Result), string(d.Category), string(d.Mode), rq.controllerName(), resource, shadow).Inc()
	m.latency.WithLabelValues(string(d.Category), shadow).Observe(elapsed.Seconds())
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
	m.errors.WithLabelValues(code, strconv.FormatBool(rq.shadow())).Inc()
}

func (m *metrics) reservation(outcome string) {
	if m == nil {
		return
	}
	m.reservations.WithLabelValues(outcome).Inc()
}
