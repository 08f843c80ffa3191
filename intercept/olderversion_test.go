package intercept_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kausality-io/kausality-proxy/intercept"
)

// An update of an older version than the one stored is refused by
// kube-apiserver with a conflict before it stores anything or asks a
// validating webhook.
// A verdict that would be confirmed on kube-apiserver's result (drift from
// the cache) therefore gets that conflict from the proxy, word for word,
// and the body goes nowhere: the client retries on the stored version. A
// verdict that stands on its own is acted on as ever.
func TestAnUpdateOfAnOlderVersionIsAnsweredWithKubeApiserversConflict(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	update := func(name, parent, rv string) []byte {
		c := benchChild(name, parent, parent+"-uid", 3)
		c.SetResourceVersion(rv)
		data, err := json.Marshal(c.Object)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	tests := []struct {
		name, child, parent, rv string
		wantCode, wantForwarded int
	}{
		{"drift on an older version: kube-apiserver's conflict", "stable-1", "stable", "150", http.StatusConflict, 0},
		{"drift on the stored version: confirmed and refused", "stable-1", "stable", "200", http.StatusForbidden, 1},
		{"expected on an older version: forwarded, kube-apiserver answers", "web-1", "web", "150", http.StatusOK, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			core, logs := observer.New(zap.InfoLevel)
			env := newServeEnv(t, zap.New(core), allowAll, enforce)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut, path: rsPath + "/" + tt.child + "?fieldManager=" + benchKCM,
				contentType: "application/json", body: update(tt.child, tt.parent, tt.rv), user: kcmUser}))
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != tt.wantCode || len(sent) != tt.wantForwarded {
				t.Fatalf("code %d with %d sent upstream, want %d with %d (%v)", rec.Code, len(sent), tt.wantCode, tt.wantForwarded, env.lastError)
			}
			if tt.wantCode == http.StatusConflict {
				want := `Operation cannot be fulfilled on replicasets.apps "stable-1": the object has been modified; please apply your changes to the latest version and try again`
				if !apierrors.IsConflict(env.lastError) || env.lastError.Error() != want {
					t.Fatalf("answered %v, want kube-apiserver's %q", env.lastError, want)
				}
				// The verdict reached is logged, with the answer it got.
				lines := logs.FilterMessage(intercept.DecisionMessage).All()
				if len(lines) != 1 || lines[0].ContextMap()["category"] != "DriftUnapproved" || lines[0].ContextMap()["outcome"] != "conflict" {
					t.Fatalf("decision lines %v, want one DriftUnapproved line with outcome conflict", lines)
				}
			}
		})
	}
}
