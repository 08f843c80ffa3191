package intercept_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// kube-apiserver parses metadata.resourceVersion as an unsigned integer and
// treats 0 as "no resourceVersion" (genericregistry Store.Update:
// doUnconditionalUpdate := newResourceVersion == 0 && AllowUnconditionalUpdate),
// so a PUT naming "0" is applied unconditionally to the stored object. The
// object's own controller must not lift a person's freeze with it, exactly
// as with a PUT naming the stored version or none.
func TestAControllersPutOfResourceVersionZeroCannotEditItsOwnControls(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, rv := range []string{"100", "", "0", "00"} {
		t.Run("rv="+rv, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowAll, enforce, frozenStableWithRecordedController)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			obj := benchParent("stable", "stable-uid", 5, 5)
			ann := obj.GetAnnotations()
			ann[annotations.Controllers] = controllerid.LongHash(kcmUser)
			// The freeze the person set is left out: the PUT removes it.
			obj.SetAnnotations(ann)
			obj.SetResourceVersion(rv)
			obj.SetManagedFields(nil)
			body, err := json.Marshal(obj.Object)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut,
				path:        "/apis/apps/v1/namespaces/apps/deployments/stable?fieldManager=" + benchKCM,
				contentType: "application/json", body: body, user: kcmUser}))
			mu.Lock()
			defer mu.Unlock()
			for _, s := range sent {
				if s.query.Get("dryRun") == "" && !strings.Contains(s.body, annotations.Freeze) {
					t.Fatalf("the controller's PUT (resourceVersion %q) lifting the person's freeze on its own Deployment was forwarded (answer %d): %s", rv, rec.Code, s.body)
				}
			}
			if rec.Code < 300 {
				t.Fatalf("answered %d, want the own-controls refusal", rec.Code)
			}
		})
	}
}
