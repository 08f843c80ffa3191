package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// The confirmation reads of the drift path are independent: the live read
// of the parent does not wait for kube-apiserver's dry run of the write,
// nor the dry run for the parent.
func TestConfirmationReadsRunTogether(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	parentRead := make(chan struct{})
	var once sync.Once
	env := newServeEnv(t, nil, allowAll, enforce, func(s *serveSetup) {
		s.reactors = append(s.reactors, reactor{verb: "get", resource: "deployments", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
			once.Do(func() { close(parentRead) })
			return false, nil, nil
		}})
	})
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("dryRun") != "" {
			select {
			case <-parentRead:
			case <-time.After(10 * time.Second):
				t.Error("the dry run waited for the live read of the parent, or the parent was not read")
			}
		}
		echoDryRun(w, r)
	}
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, driftWrite("stable-1", "stable", "stable-uid")))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("code %d, want the drift held (error %v)", rec.Code, env.lastError)
	}
}
