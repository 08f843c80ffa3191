package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPanicRecovery(t *testing.T) {
	tests := []struct {
		name      string
		next      http.HandlerFunc
		wantCode  int
		rePanics  bool
		wantState bool
	}{
		{"a plain answer passes", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }, http.StatusTeapot, false, false},
		{"a panic becomes a 500 Status", func(http.ResponseWriter, *http.Request) { panic("boom") }, http.StatusInternalServerError, false, true},
		{"a panic with an error becomes a 500 Status", func(http.ResponseWriter, *http.Request) { panic(errors.New("boom")) }, http.StatusInternalServerError, false, true},
		{"ErrAbortHandler is left to net/http", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }, 0, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := withPanicRecovery(tt.next, zap.NewNop())
			rec := httptest.NewRecorder()
			func() {
				defer func() {
					if p := recover(); (p != nil) != tt.rePanics {
						t.Fatalf("panic %v escaped; want re-panic: %v", p, tt.rePanics)
					}
				}()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil))
			}()
			if tt.rePanics {
				return
			}
			if rec.Code != tt.wantCode {
				t.Fatalf("code %d, want %d", rec.Code, tt.wantCode)
			}
			if !tt.wantState {
				return
			}
			var st metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" || st.Reason != metav1.StatusReasonInternalError {
				t.Fatalf("body is not an InternalError Status (%v): %s", err, rec.Body)
			}
			if st.Message == "" || strings.Contains(st.Message, "boom") {
				t.Fatalf("message %q should point to the log, not leak the panic", st.Message)
			}
		})
	}
}
