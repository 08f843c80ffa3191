package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWriteStack(t *testing.T) {
	tests := []struct {
		method string
		grown  bool
	}{
		{http.MethodPatch, true},
		{http.MethodPost, true},
		{http.MethodPut, true},
		{http.MethodDelete, true},
		{http.MethodGet, false},
		{http.MethodHead, false},
		{http.MethodOptions, false},
	}
	growth := growWriteStack
	t.Cleanup(func() { growWriteStack = growth })
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			grown := false
			growWriteStack = func() { grown = true }
			served := false
			h := withWriteStack(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served = true
				w.WriteHeader(http.StatusNoContent)
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, "/api/v1/namespaces/a/configmaps/x", nil))
			if !served || rec.Code != http.StatusNoContent {
				t.Fatalf("served %v, answer %d", served, rec.Code)
			}
			if grown != tt.grown {
				t.Errorf("grown %v, want %v", grown, tt.grown)
			}
		})
	}
}
