package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A reference keeps the version it was written with, and any caller may
// write one naming another version its parent's kind is served at. The
// parent is read at the version the cluster prefers all the same: read
// through a conversion that lays its spec out otherwise, it would hash to
// another spec, look as if it had moved (its controller's drift taken for
// the carrying out of a change), and its kind would be cached once more.
func TestAParentIsReadAtThePreferredVersionWhateverItsReferenceNames(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	alpha := schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "gadgets"}
	verbs := metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}
	for _, version := range []string{"v1", "v1alpha1"} {
		t.Run(version, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			env := newServeEnv(t, zap.New(core), allowAll, withGadgets, func(s *serveSetup) {
				s.resources = append(s.resources, servedResource{gvr: alpha, listKind: "GadgetList",
					resource: metav1.APIResource{Name: "gadgets", Namespaced: true, Kind: "Gadget", Verbs: verbs}})
			})
			body := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"apps","ownerReferences":[` +
				`{"apiVersion":"example.com/` + version + `","kind":"Gadget","name":"recorded","uid":"recorded-uid","controller":true}]},"data":{"k":"v"}}`
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPost, path: "/api/v1/namespaces/apps/configmaps?fieldManager=someone",
				contentType: "application/json", body: []byte(body), user: "someone"}))
			if rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
				t.Fatalf("answered %d (%v)", rec.Code, env.lastError)
			}
			fields := onlyDecisionLine(t, logs)
			if parent := fields["parent"]; fields["category"] == "ParentDeleting" || parent != "example.com/v1 Gadget apps/recorded" {
				t.Fatalf("decided %v under %v, want under the Gadget read at example.com/v1", fields["category"], parent)
			}
		})
	}
}
