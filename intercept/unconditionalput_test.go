package intercept_test

import (
	"encoding/json"
	"io"
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
// person set a moment ago that the proxy's copy does not hold yet. It is
// forwarded on the lagging copy alone, neither read live nor pinned to
// the version it was decided on, and kube-apiserver applies it to the
// stored object, the person's freeze included.
func TestAControllersUnconditionalPutIsDecidedOnTheObjectReadLive(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll)
	var got []string
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		got = append(got, string(data))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}
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
	pinned := len(got) > 0 && strings.Contains(got[len(got)-1], `"resourceVersion":"100"`)
	if n := env.liveReads("deployments"); n == 0 && !pinned && rec.Code < 300 {
		t.Errorf("answered %d after forwarding %d unconditional PUTs of the controller's own object, neither read live nor pinned to the copy it was decided on", rec.Code, len(got))
	}
}
