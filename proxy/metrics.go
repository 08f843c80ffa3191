package proxy

import (
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kausality-io/kausality-proxy/internal/seriesmemo"
)

// metrics are the proxy's own Prometheus series. Labels are bounded: verbs,
// resource names and codes, never object names or users.
type metrics struct {
	registry             *prometheus.Registry
	requests             *prometheus.CounterVec
	duration             *prometheus.HistogramVec
	inflight             prometheus.Gauge
	authFailures         prometheus.Counter
	impersonationDenials prometheus.Counter
	upstreamUp           prometheus.Gauge
	throttled            prometheus.Counter
	resources            *boundedLabels
	// resolved holds the request series by seriesKey.
	resolved *seriesmemo.Memo[seriesKey, *requestSeries]
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kausality_proxy_requests_total",
			Help: "Requests served, by verb, resource and response code.",
		}, []string{"verb", "resource", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kausality_proxy_request_duration_seconds",
			Help:    "Time to serve a request, by verb. Long-running verbs are prefixed long-running:.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"verb"}),
		inflight:             newGauge("kausality_proxy_inflight_requests", "Requests being served, long-running ones included."),
		authFailures:         newCounter("kausality_proxy_authentication_failures_total", "Requests rejected with 401 before anything was sent upstream."),
		impersonationDenials: newCounter("kausality_proxy_impersonation_denials_total", "Requests whose Impersonate-* headers were rejected before anything was sent upstream."),
		upstreamUp:           newGauge("kausality_proxy_upstream_up", "1 when the last probe of the upstream's /readyz succeeded."),
		throttled:            newCounter("kausality_proxy_throttled_requests_total", "Mutating requests answered 429 because --max-mutating-requests-inflight were in flight."),
		resources:            newBoundedLabels(maxResourceLabels),
	}
	m.resolved = seriesmemo.New(m.resolveSeries)
	m.registry.MustRegister(m.requests, m.duration, m.inflight, m.authFailures, m.impersonationDenials, m.upstreamUp, m.throttled,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// newCounter and newGauge build the series that have neither labels nor
// buckets: a name and its help are all that differ between them.
func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func newGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// maxResourceLabels bounds the distinct values of the resource label, in
// case a caller finds many resources that kube-apiserver does serve.
const maxResourceLabels = 512

// boundedLabels holds the label values admitted so far; any other value is
// "other". The resource comes from the request path, which any caller
// chooses, authenticated or not: a value is admitted only from a request
// kube-apiserver served (an answer below 400), which only a resource that
// exists gets, and only up to n values. An error to a known resource (a
// 409, a 401 without credentials) keeps its label.
type boundedLabels struct {
	mu   sync.Mutex
	n    int
	seen map[resourceLabel]string
}

func newBoundedLabels(n int) *boundedLabels {
	return &boundedLabels{n: n, seen: map[resourceLabel]string{}}
}

// value is the label of resource and subresource, "pods/exec" for both.
// The pair is looked up as it is, so that a request whose label is known
// builds no string.
func (b *boundedLabels) value(resource, subresource string, admit bool) string {
	if resource == "" && subresource == "" {
		return ""
	}
	key := resourceLabel{resource, subresource}
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.seen[key]; ok {
		return v
	}
	if !admit || len(b.seen) >= b.n {
		return "other"
	}
	v := resource
	if subresource != "" {
		v += "/" + subresource
	}
	b.seen[key] = v
	return v
}

type resourceLabel struct{ resource, subresource string }

// metricVerbs are the verbs RequestInfo gives resource requests, and the
// lower-cased methods it gives other paths. Go's server accepts any token
// as a method, and RequestInfo passes an unknown one on as the verb.
var metricVerbs = sets.New("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
	"post", "put", "head", "options")

func metricVerb(verb string) string {
	if metricVerbs.Has(verb) {
		return verb
	}
	return "other"
}
