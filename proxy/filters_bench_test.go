package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/utils/clock"
)

// BenchmarkFiltersAroundForward measures what the filters that do not
// talk to anybody cost a request on its way to the upstream and back: a
// pass-through merge patch beside a GET, so that what a write costs beyond
// a read shows.
func BenchmarkFiltersAroundForward(b *testing.B) {
	patch := `{"metadata":{"annotations":{"bench":"` + strings.Repeat("x", 64) + `"}}}`
	answer := []byte(`{"kind":"ReplicaSet","apiVersion":"apps/v1","metadata":{"name":"pool-1"}` + strings.Repeat(" ", 1800) + `}`)
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	m := newMetrics()
	longRunning := newLongRunningCheck()
	var h http.Handler = forward
	h = withRequestDeadline(h, longRunning, time.Minute, context.Background(), clock.RealClock{})
	h = withMaxMutatingInFlight(h, 400, longRunning, m)
	h = withUpgradeRestriction(h)
	h = withRequestMetrics(h, m, longRunning, clock.RealClock{})
	h = genericapifilters.WithRequestInfo(h, newRequestInfoFactory())
	h = withEarlyAnswerClose(h)
	h = withWriteStack(h)
	for _, tt := range []struct {
		name, method, path, body string
	}{
		{"GET", http.MethodGet, "/api/v1/namespaces/bench-read/configmaps/get-target", ""},
		{"PATCH", http.MethodPatch, "/apis/apps/v1/namespaces/bench-pass/replicasets/pool-1?fieldManager=bench", patch},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(tt.method, tt.path, nil)
				if tt.body != "" {
					r.Body = io.NopCloser(strings.NewReader(tt.body))
					r.ContentLength = int64(len(tt.body))
				}
				h.ServeHTTP(discardWriter{header: http.Header{}}, r)
			}
		})
	}
}

// discardWriter is the cheapest ResponseWriter: a recorder's own costs
// would hide the filters'.
type discardWriter struct{ header http.Header }

func (d discardWriter) Header() http.Header         { return d.header }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}
