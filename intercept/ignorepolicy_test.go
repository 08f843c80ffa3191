package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/kausality-io/kausality-proxy/intercept"
)

func ignorePolicy(s *serveSetup) { s.config.FailurePolicy = intercept.FailurePolicyIgnore }

// Under --failure-policy=Ignore, the Deployment's own controller names a
// controller owner of a kind nobody serves beside an edit of its own
// approvals: the parent cannot be read, but not for an outage, so the
// write is refused and nothing goes upstream rather than forwarded
// undecided.
func TestAnUnservedOwnerKindIsRefusedUnderTheIgnorePolicy(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, ignorePolicy)
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch,
		path:        "/apis/apps/v1/namespaces/apps/deployments/stable?fieldManager=kube-controller-manager",
		contentType: "application/merge-patch+json",
		body: []byte(`{"metadata":{"annotations":{"kausality.io/approvals":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"stable-1\",\"mode\":\"always\"}]"},` +
			`"ownerReferences":[{"apiVersion":"nope.example/v1","kind":"Nope","name":"x","uid":"u","controller":true}]},"spec":{"replicas":4}}`),
		user: "system:serviceaccount:kube-system:deployment-controller"}))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("answered %d, want 500 naming the unserved kind: %s", rec.Code, rec.Body)
	}
	if n := env.forwarded.Load(); n != 0 {
		t.Errorf("%d requests went upstream", n)
	}
}
