package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/endpoints/request"
)

func TestWriteStacks(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		info        *request.RequestInfo
		small, full bool
	}{
		{"a patch", http.MethodPatch, &request.RequestInfo{IsResourceRequest: true, Verb: "patch", Resource: "configmaps"}, true, true},
		{"a create", http.MethodPost, &request.RequestInfo{IsResourceRequest: true, Verb: "create", Resource: "configmaps"}, true, true},
		{"an update", http.MethodPut, &request.RequestInfo{IsResourceRequest: true, Verb: "update", Resource: "configmaps"}, true, true},
		{"a delete", http.MethodDelete, &request.RequestInfo{IsResourceRequest: true, Verb: "delete", Resource: "configmaps"}, true, true},
		{"a get keeps the small stack", http.MethodGet, &request.RequestInfo{IsResourceRequest: true, Verb: "get", Resource: "configmaps"}, false, false},
		{"a watch keeps the small stack", http.MethodGet, &request.RequestInfo{IsResourceRequest: true, Verb: "watch", Resource: "configmaps"}, false, false},
		{"exec is long-running: the write stack only", http.MethodPost, &request.RequestInfo{IsResourceRequest: true, Verb: "create", Resource: "pods", Subresource: "exec"}, true, false},
		{"no request info: the write stack only", http.MethodPost, nil, true, false},
	}
	smallGrowth, fullGrowth := growWriteStack, growInterceptedStack
	t.Cleanup(func() { growWriteStack, growInterceptedStack = smallGrowth, fullGrowth })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var small, full bool
			growWriteStack = func() { small = true }
			growInterceptedStack = func() {
				if !small {
					t.Error("the intercepted write's stack grew before the write's")
				}
				full = true
			}
			served := false
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served = true
				w.WriteHeader(http.StatusNoContent)
			})
			inner := withGrownWriteStack(next, newLongRunningCheck())
			h := withWriteStack(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.info != nil {
					r = withInfo(r, tt.info)
				}
				inner.ServeHTTP(w, r)
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, "/api/v1/namespaces/a/configmaps/x", nil))
			if !served || rec.Code != http.StatusNoContent {
				t.Fatalf("served %v, answer %d", served, rec.Code)
			}
			if small != tt.small || full != tt.full {
				t.Errorf("grew the write stack %v, the intercepted write's %v; want %v, %v", small, full, tt.small, tt.full)
			}
		})
	}
}
