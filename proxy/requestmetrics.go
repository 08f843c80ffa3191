package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/internal/httpx"
)

// withRequestMetrics counts every request by verb, resource and code, and
// times it. It sits outside authentication so that refused requests are
// counted too; their resource label is bounded (boundedLabels) because any
// caller chooses the path.
func withRequestMetrics(next http.Handler, m *metrics, longRunning request.LongRunningRequestCheck, clk clock.PassiveClock) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := clk.Now()
		rec := httpx.NewCodeRecorder(w)
		m.inflight.Inc()
		defer m.inflight.Dec()
		// Counted even when the handler panics: the reverse proxy aborts
		// a stream whose caller went away with a panic, and a panic further
		// in is answered 500 by the recovery outside this filter.
		returned := false
		defer func() { m.count(r, rec.Code(), returned, clk.Since(start), longRunning) }()
		next.ServeHTTP(rec, r)
		returned = true
	})
}

// count adds a served request to its series. A request whose handler
// panicked before it answered is counted as the 500 it is answered with.
func (m *metrics) count(r *http.Request, code int, returned bool, took time.Duration, longRunning request.LongRunningRequestCheck) {
	key := seriesKey{verb: "unknown", code: code}
	if key.code == 0 {
		key.code = http.StatusOK
		if !returned {
			key.code = http.StatusInternalServerError
		}
	}
	if info, ok := request.RequestInfoFrom(r.Context()); ok {
		key.verb, key.longRunning = metricVerb(info.Verb), longRunning(r, info)
		key.resource = m.resources.value(info.Resource, info.Subresource, key.code < http.StatusBadRequest)
	}
	s := m.resolved.For(key)
	s.requests.Inc()
	s.duration.Observe(took.Seconds())
}

// seriesKey is what a request is counted by. Every field is bounded (the
// resource by boundedLabels), so the series resolved for it can be kept.
type seriesKey struct {
	verb        string
	longRunning bool
	resource    string
	code        int
}

// requestSeries are a request's counter and duration histogram, resolved
// once per label set: resolving them anew hashes and checks every label
// value on every request.
type requestSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func (m *metrics) resolveSeries(key seriesKey) *requestSeries {
	verb := key.verb
	if key.longRunning {
		verb = "long-running:" + verb
	}
	return &requestSeries{
		requests: m.requests.WithLabelValues(verb, key.resource, strconv.Itoa(key.code)),
		duration: m.duration.WithLabelValues(verb),
	}
}
