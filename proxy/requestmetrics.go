package proxy

import (
	"net/http"
	"strconv"

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
		next.ServeHTTP(rec, r)
		code := rec.Code()
		if code == 0 {
			code = http.StatusOK
		}
		verb, resource := "unknown", ""
		if info, ok := request.RequestInfoFrom(r.Context()); ok {
			verb, resource = metricVerb(info.Verb), info.Resource
			if info.Subresource != "" {
				resource += "/" + info.Subresource
			}
			resource = m.resources.value(resource, code < http.StatusBadRequest)
			if longRunning(r, info) {
				verb = "long-running:" + verb
			}
		}
		m.requests.WithLabelValues(verb, resource, strconv.Itoa(code)).Inc()
		m.duration.WithLabelValues(verb).Observe(clk.Since(start).Seconds())
	})
}
