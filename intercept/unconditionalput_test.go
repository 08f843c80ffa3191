package intercept_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// As TestAControllersPatchOfItsControlsIsDecidedOnTheObjectReadLive, but
// with a PUT that names no resourceVersion (an unconditional update, which
// kube-apiserver allows for Deployments and most built-in kinds): it
// replaces the annotations whole, so it removes a freeze or a rejection a
// person set a moment ago that the proxy's copy does not hold yet. So it
// is decided on the object read live (or pinned to the version it was
// decided on), never forwarded on the lagging copy alone.
func TestAControllersUnconditionalPutIsDecidedOnTheObjectReadLive(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll)
	got := answeringEmpty(env)
	// The controller's copy, as the proxy's cache holds it, without the
	// resourceVersion and without managedFields.
	obj := benchParent("stable", "stable-uid", 5, 5)
	unstructured.RemoveNestedField(obj.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
	body, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	env.dyn.ClearActions()
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut,
		path:        "/apis/apps/v1/namespaces/apps/deployments/stable?fieldManager=kube-controller-manager",
		contentType: "application/json", body: body,
		user: "system:serviceaccount:kube-system:deployment-controller"}))
	pinned := len(*got) > 0 && strings.Contains((*got)[len(*got)-1], `"resourceVersion":"100"`)
	if n := env.liveReads("deployments"); n == 0 && !pinned && rec.Code < 300 {
		t.Errorf("answered %d after forwarding %d unconditional PUTs of the controller's own object, neither read live nor pinned to the copy it was decided on", rec.Code, len(*got))
	}
}
