package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/endpoints/request"
)

func TestUpgradeRestriction(t *testing.T) {
	tests := []struct {
		name        string
		info        *request.RequestInfo
		upgrade     bool
		wantUpgrade bool
	}{
		{"exec keeps its upgrade", &request.RequestInfo{IsResourceRequest: true, Verb: "create", Resource: "pods", Subresource: "exec"}, true, true},
		{"attach keeps its upgrade", &request.RequestInfo{IsResourceRequest: true, Verb: "create", Resource: "pods", Subresource: "attach"}, true, true},
		{"portforward keeps its upgrade", &request.RequestInfo{IsResourceRequest: true, Verb: "create", Resource: "pods", Subresource: "portforward"}, true, true},
		{"the proxy verb keeps its upgrade", &request.RequestInfo{IsResourceRequest: true, Verb: "proxy", Resource: "services"}, true, true},
		{"watch keeps its upgrade", &request.RequestInfo{IsResourceRequest: true, Verb: "watch", Resource: "configmaps"}, true, true},
		{"a write asking for an upgrade is served plain", &request.RequestInfo{IsResourceRequest: true, Verb: "update", Resource: "configmaps"}, true, false},
		{"a status write asking for an upgrade is served plain", &request.RequestInfo{IsResourceRequest: true, Verb: "update", Resource: "pods", Subresource: "status"}, true, false},
		{"a non-resource request asking for an upgrade is served plain", &request.RequestInfo{Verb: "get", Path: "/version"}, true, false},
		{"no request info: served plain", nil, true, false},
		{"no upgrade asked: untouched", &request.RequestInfo{IsResourceRequest: true, Verb: "update", Resource: "configmaps"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotUpgrade, gotConnection string
			h := withUpgradeRestriction(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				gotUpgrade, gotConnection = r.Header.Get("Upgrade"), r.Header.Get("Connection")
			}))
			r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/a/pods/p/exec", nil)
			if tt.upgrade {
				r.Header.Set("Connection", "Upgrade")
				r.Header.Set("Upgrade", "SPDY/3.1")
			}
			if tt.info != nil {
				r = withInfo(r, tt.info)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if kept := gotUpgrade != "" && gotConnection != ""; kept != tt.wantUpgrade {
				t.Errorf("upstream saw Upgrade %q Connection %q; want the upgrade kept: %v", gotUpgrade, gotConnection, tt.wantUpgrade)
			}
			if tt.upgrade && !tt.wantUpgrade && (gotUpgrade != "" || gotConnection != "") {
				t.Errorf("a plain request kept Upgrade %q Connection %q", gotUpgrade, gotConnection)
			}
		})
	}
}
