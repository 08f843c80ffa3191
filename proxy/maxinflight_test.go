package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// TestMaxMutatingInFlight fills the one slot with a write held inside the
// next handler, then sends each case alongside it.
func TestMaxMutatingInFlight(t *testing.T) {
	tests := []struct {
		name     string
		info     *request.RequestInfo
		throttle bool
	}{
		{"a second write waits for no slot: 429", &request.RequestInfo{IsResourceRequest: true, Verb: "update", Resource: "configmaps"}, true},
		{"a create counts", &request.RequestInfo{IsResourceRequest: true, Verb: "create", Resource: "configmaps"}, true},
		{"deletecollection counts", &request.RequestInfo{IsResourceRequest: true, Verb: "deletecollection", Resource: "configmaps"}, true},
		{"get is not counted", &request.RequestInfo{IsResourceRequest: true, Verb: "get", Resource: "configmaps"}, false},
		{"list is not counted", &request.RequestInfo{IsResourceRequest: true, Verb: "list", Resource: "configmaps"}, false},
		{"watch is not counted", &request.RequestInfo{IsResourceRequest: true, Verb: "watch", Resource: "configmaps"}, false},
		{"exec is long-running, not counted", &request.RequestInfo{IsResourceRequest: true, Verb: "create", Resource: "pods", Subresource: "exec"}, false},
		{"no request info: not counted", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held, release := make(chan struct{}), make(chan struct{})
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Hold") != "" {
					close(held)
					<-release
				}
				w.WriteHeader(http.StatusOK)
			})
			m := newMetrics()
			h := withMaxMutatingInFlight(next, 1, newLongRunningCheck(), m)

			first := withInfo(httptest.NewRequest(http.MethodPut, "/api/v1/namespaces/a/configmaps/x", nil),
				&request.RequestInfo{IsResourceRequest: true, Verb: "update", Resource: "configmaps"})
			first.Header.Set("X-Hold", "1")
			done := make(chan struct{})
			go func() { defer close(done); h.ServeHTTP(httptest.NewRecorder(), first) }()
			<-held

			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/a/configmaps", nil)
			if tt.info != nil {
				r = withInfo(r, tt.info)
			}
			h.ServeHTTP(rec, r)
			close(release)
			<-done

			if !tt.throttle {
				if rec.Code != http.StatusOK {
					t.Fatalf("code %d, want 200: %s", rec.Code, rec.Body)
				}
				return
			}
			if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
				t.Fatalf("code %d Retry-After %q, want 429 with Retry-After 1", rec.Code, rec.Header().Get("Retry-After"))
			}
			var st metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" || st.Reason != metav1.StatusReasonTooManyRequests {
				t.Fatalf("body is not a TooManyRequests Status (%v): %s", err, rec.Body)
			}
		})
	}
}

func TestMaxMutatingInFlightUnlimited(t *testing.T) {
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if h := withMaxMutatingInFlight(next, 0, newLongRunningCheck(), newMetrics()); h == nil {
		t.Fatal("no handler")
	}
}

func withInfo(r *http.Request, info *request.RequestInfo) *http.Request {
	return r.WithContext(request.WithRequestInfo(r.Context(), info))
}
