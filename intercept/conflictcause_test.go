package intercept_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// kube-apiserver answers 409 Conflict for more than the proxy's own
// resourceVersion precondition: a write whose metadata.uid names another
// incarnation of the object ("Precondition failed: UID in precondition"),
// an admission webhook that denies with code 409. Those answer the
// caller's write, which no retry changes: a write the proxy pinned (here a
// new writer's change, which adds it to the updaters record) gets them as
// kube-apiserver sent them, once, and never the proxy's 429 "kept
// changing".
func TestAConflictThatIsNotThePreconditionsReachesTheClient(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct{ name, body, answer, want string }{
		{"a uid precondition", `{"metadata":{"uid":"other-uid"},"spec":{"replicas":7}}`,
			`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Operation cannot be fulfilled on replicasets.apps \"stable-1\": Precondition failed: UID in precondition: other-uid, UID in object meta: stable-1-uid","reason":"Conflict","details":{"name":"stable-1","group":"apps","kind":"replicasets"},"code":409}`,
			"UID in precondition"},
		{"an admission webhook's 409", `{"spec":{"replicas":7}}`,
			`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"admission webhook \"quota.example.com\" denied the request: replicas held by another rollout","reason":"Conflict","code":409}`,
			"admission webhook"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []string
			)
			env := newServeEnv(t, nil, allowAll)
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				data, _ := io.ReadAll(r.Body)
				mu.Lock()
				sent = append(sent, r.URL.RawQuery+" "+string(data))
				mu.Unlock()
				// The same answer for a dry run: it does not depend on
				// the object's version.
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(tc.answer))
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/stable-1?fieldManager=kubectl-edit",
				contentType: "application/merge-patch+json", body: []byte(tc.body), user: "alice"}))
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("the client got %d %s (error %v), want kube-apiserver's 409", rec.Code, rec.Body, env.lastError)
			}
			if len(sent) != 1 {
				t.Errorf("the write went upstream %d times, want once: %q", len(sent), sent)
			}
		})
	}
}
