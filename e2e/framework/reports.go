package framework

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// ReportSink is a DriftReport endpoint the proxy delivers to.
type ReportSink struct {
	srv     *httptest.Server
	down    atomic.Bool
	refused atomic.Int64
	mu      sync.Mutex
	reports []v1alpha1.DriftReport
}

// NewReportSink starts a DriftReport endpoint; Close stops it.
func NewReportSink() *ReportSink { return newReportSink() }

func newReportSink() *ReportSink {
	s := &ReportSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			s.refused.Add(1)
			http.Error(w, "receiver down", http.StatusServiceUnavailable)
			return
		}
		data, _ := io.ReadAll(r.Body)
		var rep v1alpha1.DriftReport
		if err := json.Unmarshal(data, &rep); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.reports = append(s.reports, rep)
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	return s
}

// URL is where the proxy posts reports.
func (s *ReportSink) URL() string { return s.srv.URL }

// For returns the reports about one child, in arrival order.
func (s *ReportSink) For(namespace, childName string) []v1alpha1.DriftReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []v1alpha1.DriftReport
	for _, r := range s.reports {
		if r.Spec.Child.Namespace == namespace && r.Spec.Child.Name == childName {
			out = append(out, r)
		}
	}
	return out
}

// SetDown makes the endpoint answer 503 to everything (down) or accept
// reports again.
func (s *ReportSink) SetDown(down bool) { s.down.Store(down) }

// Refused counts the deliveries answered 503 while down.
func (s *ReportSink) Refused() int64 { return s.refused.Load() }

// All returns every report received, in arrival order.
func (s *ReportSink) All() []v1alpha1.DriftReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]v1alpha1.DriftReport(nil), s.reports...)
}

// Close stops the endpoint.
func (s *ReportSink) Close() { s.srv.Close() }
