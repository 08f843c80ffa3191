package intercept_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// withOrphan adds a ReplicaSet the Deployment's controller created without
// an ownerReference (a new origin), carrying the mode it chose.
func withOrphan(s *serveSetup) {
	orphan := benchChild("orphan-1", "stable", "stable-uid", 1)
	orphan.SetOwnerReferences(nil)
	orphan.SetAnnotations(map[string]string{"kausality.io/mode": "log"})
	s.objects = append(s.objects, orphan)
}

// The controller of a settled Deployment adopts an orphan it created with
// mode log: the adoption is a write under the Deployment, held as drift
// in enforce mode as creating the child there would be, and nothing goes
// upstream.
func TestAdoptingAnOrphanUnderASettledParentIsHeld(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, enforce, withOrphan)
	// The orphan as stored, with the Deployment as its controller.
	adopted := benchChild("orphan-1", "stable", "stable-uid", 1)
	adopted.SetAnnotations(map[string]string{"kausality.io/mode": "log"})
	body, err := json.Marshal(adopted.Object)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut,
		path:        "/apis/apps/v1/namespaces/apps/replicasets/orphan-1?fieldManager=kube-controller-manager",
		contentType: "application/json", body: body,
		user: "system:serviceaccount:kube-system:deployment-controller"}))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("the adoption was answered %d, want 403: %s (%v)", rec.Code, rec.Body, env.lastError)
	}
	// Held as drift: confirmed with a dry run, the write itself never
	// forwarded.
	if n := env.forwarded.Load(); n > 1 {
		t.Errorf("%d requests went upstream for a held adoption, want its dry run alone", n)
	}
}
