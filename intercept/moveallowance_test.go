package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The deployment controller changes a ReplicaSet's image under its
// reconciling parent "web", whose allowances (enforce) allow only
// spec.replicas: refused. The same write that also moves the ReplicaSet
// there from the settled parent "stable" (log mode, the default) is
// refused too: that it is drift under the parent it leaves does not spare
// it the allowance check of the parent it joins.
func TestMovingAChildAwayFromALogModeParentKeepsTheAllowancesOfTheParentItJoins(t *testing.T) {
	withGrant := webReplicasGrant(t)
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name  string
		child string
	}{{"control: a child of web", "web-1"}, {"moved from stable to web", "stable-1"}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, withGrant, withNamespaceAllowanceMode("enforce"))
			c := benchChild(tc.child, "web", "web-uid", 1) // owned by web after the write
			cs, _, _ := unstructured.NestedSlice(c.Object, "spec", "template", "spec", "containers")
			cs[0].(map[string]interface{})["image"] = "evil:1"
			_ = unstructured.SetNestedSlice(c.Object, cs, "spec", "template", "spec", "containers")
			data, _ := c.MarshalJSON()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut,
				path: "/apis/apps/v1/namespaces/apps/replicasets/" + tc.child, contentType: "application/json", body: data, user: kcmUser}))
			if rec.Code != http.StatusForbidden {
				t.Fatalf("code %d, want 403: the image change violates web's enforce-mode allowances (forwarded %d, error %v)", rec.Code, env.forwarded.Load(), env.lastError)
			}
		})
	}
}
