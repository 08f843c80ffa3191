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

// stableOneOwnedByItsWriter records the deployment controller as the
// controller of the ReplicaSet stable-1 too: one service account that
// reconciles both levels, as many operators do.
func stableOneOwnedByItsWriter(s *serveSetup) {
	for _, obj := range s.objects {
		if o, ok := obj.(*unstructured.Unstructured); ok && o.GetName() == "stable-1" {
			ann := o.GetAnnotations()
			ann[annotations.Controllers] = controllerid.LongHash(kcmUser)
			o.SetAnnotations(ann)
		}
	}
}

// A controller may not edit its own object's controls through any write
// shape, shadow mode included: a shadow write is never made to fail, but
// the controls its writer may not change go upstream as stored. Otherwise
// an approval it wrote in shadow would outlive the shadow entry (and
// approve its drift in enforce mode), and a freeze it lifted held every
// other writer too; with an entry narrowed by fieldManager, the controller
// would put any write it likes in shadow by naming that field manager.
func TestAShadowWriteCannotEditItsWritersOwnControls(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n" +
		"- name: trial\n  match:\n    serviceAccount: kube-system/deployment-controller\n    fieldManager: trial\n  mode: shadow\n"))
	if err != nil {
		t.Fatal(err)
	}
	approveAll := `{"metadata":{"annotations":{"kausality.io/approvals":"[{\"apiVersion\":\"*\",\"kind\":\"*\",\"name\":\"*\",\"mode\":\"always\"}]"}}}`
	for _, tc := range []struct {
		name, path, body, forbidden string
		setup                       []serveOption
	}{
		{"approves its own drift", "/apis/apps/v1/namespaces/apps/deployments/stable?fieldManager=trial", approveAll, `\"mode\":\"always\"`, nil},
		{"lifts a person's freeze", "/apis/apps/v1/namespaces/apps/deployments/stable?fieldManager=trial",
			`{"metadata":{"annotations":{"kausality.io/freeze":null}}}`, `"kausality.io/freeze":null`, nil},
		{"sets its own mode through /status", "/apis/apps/v1/namespaces/apps/deployments/stable/status?fieldManager=trial",
			`{"metadata":{"annotations":{"kausality.io/mode":"log"}}}`, `"kausality.io/mode":"log"`, nil},
		// Held for another reason first (its parent is frozen), the write
		// is not refused for its controls, which are kept all the same.
		{"approves its own drift in a write held otherwise", "/apis/apps/v1/namespaces/apps/replicasets/stable-1?fieldManager=trial",
			`{"spec":{"replicas":5},` + approveAll[1:], `\"mode\":\"always\"`, []serveOption{stableOneOwnedByItsWriter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			opts := append([]serveOption{enforce, frozenStableWithRecordedController, func(s *serveSetup) { s.config.Settings = func() *config.Config { return cfg } }}, tc.setup...)
			env := newServeEnv(t, nil, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }, opts...)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: tc.path,
				contentType: "application/merge-patch+json", body: []byte(tc.body), user: kcmUser}))
			mu.Lock()
			defer mu.Unlock()
			if len(sent) == 0 {
				t.Fatalf("nothing forwarded (answer %d): a shadow write is never made to fail", rec.Code)
			}
			for _, s := range sent {
				if strings.Contains(s.body, tc.forbidden) {
					t.Errorf("the controller's own edit of %s reached kube-apiserver (answer %d): %s", tc.forbidden, rec.Code, s.body)
				}
			}
		})
	}
}
