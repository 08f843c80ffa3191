package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	testingclock "k8s.io/utils/clock/testing"
)

func TestRequestMetrics(t *testing.T) {
	tests := []struct {
		name          string
		method, path  string
		noRequestInfo bool
		code          int // what the next handler answers; 0: nothing
		took          time.Duration
		panics        any // what the next handler panics with, after answering code

		wantVerb, wantResource, wantCode string
	}{
		{name: "a served read", method: http.MethodGet, path: "/api/v1/namespaces/default/pods", code: http.StatusOK, took: 1500 * time.Millisecond,
			wantVerb: "list", wantResource: "pods", wantCode: "200"},
		{name: "a write answered with nothing counts as 200", method: http.MethodPost, path: "/api/v1/namespaces/default/configmaps", took: 250 * time.Millisecond,
			wantVerb: "create", wantResource: "configmaps", wantCode: "200"},
		{name: "a watch is long-running", method: http.MethodGet, path: "/api/v1/namespaces/default/pods?watch=true", code: http.StatusOK, took: time.Minute,
			wantVerb: "long-running:watch", wantResource: "pods", wantCode: "200"},
		{name: "a subresource is named with its resource", method: http.MethodPost, path: "/api/v1/namespaces/default/pods/p/exec", code: http.StatusOK, took: time.Second,
			wantVerb: "long-running:create", wantResource: "pods/exec", wantCode: "200"},
		{name: "a refused request to a made-up resource gets no label of its own", method: http.MethodGet, path: "/api/v1/made-up-by-anyone", code: http.StatusUnauthorized, took: time.Millisecond,
			wantVerb: "list", wantResource: "other", wantCode: "401"},
		{name: "a non-resource path", method: http.MethodGet, path: "/healthz", code: http.StatusOK, took: time.Millisecond,
			wantVerb: "get", wantResource: "", wantCode: "200"},
		{name: "an unknown method", method: "FROBNICATE", path: "/api/v1/namespaces/default/pods", code: http.StatusMethodNotAllowed, took: time.Millisecond,
			wantVerb: "other", wantResource: "other", wantCode: "405"},
		{name: "a stream the caller left is counted with the code it was answered", method: http.MethodGet, path: "/api/v1/namespaces/default/pods", code: http.StatusOK, panics: http.ErrAbortHandler, took: time.Second,
			wantVerb: "list", wantResource: "pods", wantCode: "200"},
		{name: "a panic before any answer is counted as the 500 it gets", method: http.MethodPatch, path: "/api/v1/namespaces/default/pods/p", panics: "bug", took: time.Millisecond,
			wantVerb: "patch", wantResource: "other", wantCode: "500"},
		{name: "a request without request info", method: http.MethodGet, path: "/api/v1/pods", noRequestInfo: true, code: http.StatusOK, took: 2 * time.Second,
			wantVerb: "unknown", wantResource: "", wantCode: "200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			m := newMetrics()
			var inflight float64
			next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				inflight = testutil.ToFloat64(m.inflight)
				clk.Step(tt.took)
				if tt.code != 0 {
					w.WriteHeader(tt.code)
				}
				if tt.panics != nil {
					panic(tt.panics)
				}
			})
			h := withRequestMetrics(next, m, newLongRunningCheck(), clk)
			if !tt.noRequestInfo {
				h = genericapifilters.WithRequestInfo(h, newRequestInfoFactory())
			}
			func() {
				defer func() {
					if p := recover(); p != tt.panics {
						t.Errorf("panic %v, want %v passed on", p, tt.panics)
					}
				}()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tt.method, tt.path, nil))
			}()

			if inflight != 1 || testutil.ToFloat64(m.inflight) != 0 {
				t.Errorf("in flight %v while served and %v after, want 1 and 0", inflight, testutil.ToFloat64(m.inflight))
			}
			if got := testutil.ToFloat64(m.requests.WithLabelValues(tt.wantVerb, tt.wantResource, tt.wantCode)); got != 1 {
				t.Errorf("requests{verb=%q,resource=%q,code=%q} = %v, want 1", tt.wantVerb, tt.wantResource, tt.wantCode, got)
			}
			if n := testutil.CollectAndCount(m.requests); n != 1 {
				t.Errorf("%d request series, want 1", n)
			}
			count, sum := histogramOf(t, m, tt.wantVerb)
			if count != 1 || sum != tt.took.Seconds() {
				t.Errorf("duration{verb=%q}: %d observations summing to %vs, want one of %vs", tt.wantVerb, count, sum, tt.took.Seconds())
			}
		})
	}
}

// histogramOf reads the duration histogram of one verb.
func histogramOf(t *testing.T, m *metrics, verb string) (uint64, float64) {
	t.Helper()
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "kausality_proxy_request_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "verb" && l.GetValue() == verb {
					return s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

// Series are kept once resolved, by their labels: a resource refused
// before it was served is counted as "other", and under its own name once
// a request to it was served, as when every request resolved its series.
func TestRequestMetricsKeepTheirSeries(t *testing.T) {
	m := newMetrics()
	code := http.StatusUnauthorized
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) })
	h := genericapifilters.WithRequestInfo(withRequestMetrics(next, m, newLongRunningCheck(), testingclock.NewFakeClock(time.Now())), newRequestInfoFactory())
	serve := func(c int) {
		code = c
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPatch, "/apis/apps/v1/namespaces/ns/replicasets/r", nil))
	}
	serve(http.StatusUnauthorized)
	serve(http.StatusOK)
	serve(http.StatusOK)
	serve(http.StatusUnauthorized)
	for _, want := range []struct {
		resource, code string
		n              float64
	}{{"other", "401", 1}, {"replicasets", "200", 2}, {"replicasets", "401", 1}} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("patch", want.resource, want.code)); got != want.n {
			t.Errorf("requests{patch,%s,%s} = %v, want %v", want.resource, want.code, got, want.n)
		}
	}
	if count, _ := histogramOf(t, m, "patch"); count != 4 {
		t.Errorf("%d patch durations, want 4", count)
	}
}
