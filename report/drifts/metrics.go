package drifts

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// Outcomes of recording a drift.
const (
	resultCreated      = "created"
	resultDeduplicated = "deduplicated"
	resultReopened     = "reopened"
)

// Why a drift or a report was dropped.
const (
	dropQueueFull    = "queue_full"
	dropRecordFailed = "record_failed"
	dropShutdown     = "shutdown"
	dropExpired      = "expired"
	dropUnreadable   = "unreadable_record"
	dropRejected     = "rejected"
)

// metrics of the ledger. Labels never carry URLs (they may hold tokens),
// ids or object names.
type metrics struct {
	recorded    *prometheus.CounterVec
	dropped     *prometheus.CounterVec
	sent        *prometheus.CounterVec
	retries     *prometheus.CounterVec
	resolved    *prometheus.CounterVec
	escalations *prometheus.CounterVec
	suppressed  prometheus.Counter
	// suppressedByQuota counts the drifts not recorded for a quota or
	// the rate limit; floods counts the runs of them, one per controller
	// and flood.
	suppressedByQuota *prometheus.CounterVec
	floods            *prometheus.CounterVec
	leader            prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		recorded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kausality_proxy_driftreports_recorded_total",
			Help: "Detected drifts this replica took to the cluster's drift records, by result (created, deduplicated, reopened)."}, []string{"result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kausality_proxy_driftreports_dropped_total",
			Help: "Drifts or reports given up, by reason (queue_full, record_failed, shutdown, expired, unreadable_record, rejected: a receiver answered 4xx)."}, []string{"reason"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kausality_proxy_driftreports_sent_total",
			Help: "DriftReport deliveries acknowledged with 2xx, by phase."}, []string{"phase"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kausality_proxy_driftreports_retries_total",
			Help: "Failed DriftReport delivery attempts that will be retried with backoff, by phase."}, []string{"phase"}),
		resolved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kausality_proxy_driftreports_resolved_total",
			Help: "Drifts found to have ended, by reason."}, []string{"reason"}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kausality_proxy_escalations_total",
			Help: "Escalation messages posted, marked resolved, suppressed by the message rate limit (counted in a summary), or failed (retried)."}, []string{"result"}),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{Name: "kausality_proxy_driftreports_snoozed_total",
			Help: "Drifts that ended while their parent was snoozed, before anyone was told: never sent."}),
		suppressedByQuota: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kausality_proxy_driftreports_quota_suppressed_total",
			Help: "New drifts not recorded, nor reported, because their controller or parent reached a drift record quota or the controller its rate limit, by quota."}, []string{"quota"}),
		floods: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kausality_proxy_driftreports_floods_total",
			Help: "Floods of suppressed drifts: one per controller and run of suppressions (logged once as a warning), by the quota that started it."}, []string{"quota"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kausality_proxy_driftreports_sender",
			Help: "1 while this replica holds the lease and sends DriftReports, 0 otherwise."}),
	}
	for _, r := range []string{resultCreated, resultDeduplicated, resultReopened} {
		m.recorded.WithLabelValues(r)
	}
	for _, r := range []string{dropQueueFull, dropRecordFailed, dropShutdown, dropExpired, dropUnreadable, dropRejected} {
		m.dropped.WithLabelValues(r)
	}
	for _, q := range []string{QuotaControllerRecords, QuotaControllerBytes, QuotaParentRecords, QuotaParentBytes, QuotaTotal, QuotaRate} {
		m.suppressedByQuota.WithLabelValues(q)
		m.floods.WithLabelValues(q)
	}
	for _, p := range []v1alpha1.DriftReportPhase{v1alpha1.PhaseDetected, v1alpha1.PhaseResolved} {
		m.sent.WithLabelValues(string(p))
		m.retries.WithLabelValues(string(p))
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer, l *Ledger) error {
	cs := []prometheus.Collector{m.recorded, m.dropped, m.sent, m.retries, m.resolved, m.escalations, m.suppressed, m.suppressedByQuota, m.floods, m.leader,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kausality_proxy_driftreports_records",
			Help: "Drift records in the cluster: open drifts, and resolved ones whose reports are not all out.",
		}, func() float64 { return float64(len(l.records.GetStore().ListKeys())) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
