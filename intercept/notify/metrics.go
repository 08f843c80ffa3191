package notify

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the sender. The only label is the phase (Detected, Resolved):
// never URLs (they may carry tokens), ids or object names.
//
// Counters count deliveries, i.e. (report, URL) pairs, except
// deduplicated, which counts reports.
type metrics struct {
	enqueued     *prometheus.CounterVec
	sent         *prometheus.CounterVec
	failed       *prometheus.CounterVec
	dropped      *prometheus.CounterVec
	deduplicated *prometheus.CounterVec
	retries      *prometheus.CounterVec
}

func newMetrics() *metrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kausality_proxy_driftreports_" + name + "_total",
			Help: help,
		}, []string{"phase"})
	}
	m := &metrics{
		enqueued:     vec("enqueued", "DriftReport deliveries (report × URL) put on a delivery queue, by phase."),
		sent:         vec("sent", "DriftReport deliveries acknowledged with 2xx, by phase."),
		failed:       vec("failed", "DriftReport deliveries given up after retries or a non-retryable response, by phase."),
		dropped:      vec("dropped", "DriftReport deliveries dropped: queue full, or discarded on shutdown, by phase."),
		deduplicated: vec("deduplicated", "DriftReports not queued because the same open drift is already queued or delivered everywhere, by phase."),
		retries:      vec("retries", "DriftReport delivery retries (after a transport error, 5xx or 429), by phase."),
	}
	for _, v := range []*prometheus.CounterVec{m.enqueued, m.sent, m.failed, m.dropped, m.deduplicated, m.retries} {
		for _, p := range []Phase{PhaseDetected, PhaseResolved} {
			v.WithLabelValues(string(p)) // export zeros
		}
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer, s *Sender) error {
	cs := []prometheus.Collector{m.enqueued, m.sent, m.failed, m.dropped, m.deduplicated, m.retries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kausality_proxy_driftreports_open",
			Help: "Open drifts (Detected, not yet Resolved) remembered for deduplication and resolution.",
		}, func() float64 { return float64(s.OpenDrifts()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kausality_proxy_driftreports_queued",
			Help: "DriftReport deliveries waiting in the queues (all URLs).",
		}, func() float64 { return float64(s.queued()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
