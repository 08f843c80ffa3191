package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kube-apiserver's namespaces/finalize strategy (namespaceFinalizeStrategy:
// PrepareForUpdate resets only the status, ValidateNamespaceFinalizeUpdate
// only the immutable metadata) stores the metadata of the body, annotations
// included, like the status strategy does: whoever may update
// namespaces/finalize (kube-controller-manager's namespace-controller,
// which may not update namespaces) must not lower every child's namespace
// mode from enforce to log through it.
func TestANamespaceFinalizeIsGuardedAsAStatusWrite(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	ns := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"apps","resourceVersion":"1","annotations":{"kausality.io/mode":"log","kausality.io/allowance-mode":"shadow"}},"spec":{"finalizers":[]}}`
	for _, sub := range []string{"status", "finalize"} {
		t.Run(sub, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, func(s *serveSetup) {
				s.objects[0].(*unstructured.Unstructured).SetAnnotations(map[string]string{"kausality.io/mode": "enforce", "kausality.io/allowance-mode": "enforce"})
			})
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut, path: "/api/v1/namespaces/apps/" + sub,
				contentType: "application/json", body: []byte(ns), user: "system:serviceaccount:kube-system:namespace-controller"}))
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != http.StatusForbidden || len(sent) != 0 {
				t.Fatalf("a Namespace %s write lowering kausality.io/mode went upstream (code %d, %d forwarded: %v); want it refused as a status write is",
					sub, rec.Code, len(sent), sent)
			}
		})
	}
}
