package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// The Deployment "stable" is frozen by a person, and its controller (the
// deployment controller) is recorded in kausality.io/controllers.
func frozenStableWithRecordedController(s *serveSetup) {
	for _, obj := range s.objects {
		if o, ok := obj.(*unstructured.Unstructured); ok && o.GetKind() == "Deployment" && o.GetName() == "stable" {
			ann := o.GetAnnotations()
			ann[annotations.Controllers] = controllerid.LongHash(kcmUser)
			ann[annotations.Freeze] = `{"user":"ops@example.com","reason":"incident 42"}`
			o.SetAnnotations(ann)
		}
	}
}

// A controller may not edit its own parent's controls "through every write
// shape". A controller whose writes are (partly) in shadow mode can: its
// shadow write goes upstream as it came, only the system annotations are
// put back. An approval it writes in shadow outlives the shadow entry (and
// approves its enforce-mode drift), and a freeze it lifts held every other
// writer too. With a fieldManager-narrowed entry, the controller puts any
// write it likes in shadow by naming that field manager.
func TestAShadowWriteCannotEditItsWritersOwnControls(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n" +
		"- name: trial\n  match:\n    serviceAccount: kube-system/deployment-controller\n    fieldManager: trial\n  mode: shadow\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, body, forbidden string }{
		{"approves its own drift", "/apis/apps/v1/namespaces/apps/deployments/stable?fieldManager=trial",
			`{"metadata":{"annotations":{"kausality.io/approvals":"[{\"apiVersion\":\"*\",\"kind\":\"*\",\"name\":\"*\",\"mode\":\"always\"}]"}}}`,
			`\"mode\":\"always\"`},
		{"lifts a person's freeze", "/apis/apps/v1/namespaces/apps/deployments/stable?fieldManager=trial",
			`{"metadata":{"annotations":{"kausality.io/freeze":null}}}`, `"kausality.io/freeze":null`},
		{"sets its own mode through /status", "/apis/apps/v1/namespaces/apps/deployments/stable/status?fieldManager=trial",
			`{"metadata":{"annotations":{"kausality.io/mode":"log"}}}`, `"kausality.io/mode":"log"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil },
				enforce, frozenStableWithRecordedController, func(s *serveSetup) { s.config.Settings = func() *config.Config { return cfg } })
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: tc.path,
				contentType: "application/merge-patch+json", body: []byte(tc.body), user: kcmUser}))
			mu.Lock()
			defer mu.Unlock()
			for _, s := range sent {
				if strings.Contains(s.body, tc.forbidden) {
					t.Errorf("the controller's own edit of %s reached kube-apiserver (answer %d): %s", tc.forbidden, rec.Code, s.body)
				}
			}
		})
	}
}
