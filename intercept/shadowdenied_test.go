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

// As TestAShadowWriteCannotEditItsWritersOwnControls, but the write is
// refused for another reason first (the parent is frozen, so the decision
// is Frozen, not OwnControlsRefused): guardOwnControls does not run on a
// denied write, so KeepShadowAnnotations falls back to the system
// annotations alone, and the object's own controller approves its own
// drift in shadow mode.
func TestAShadowWriteDeniedOtherwiseCannotEditItsWritersOwnControls(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n" +
		"- name: trial\n  match:\n    serviceAccount: kube-system/deployment-controller\n    fieldManager: trial\n  mode: shadow\n"))
	if err != nil {
		t.Fatal(err)
	}
	// stable-1's own controller is recorded: the deployment controller
	// (one service account reconciling both levels, as many operators do).
	ownController := func(s *serveSetup) {
		for _, obj := range s.objects {
			if o, ok := obj.(*unstructured.Unstructured); ok && o.GetName() == "stable-1" {
				ann := o.GetAnnotations()
				ann[annotations.Controllers] = controllerid.LongHash(kcmUser)
				o.SetAnnotations(ann)
			}
		}
	}
	var (
		mu   sync.Mutex
		sent []forwardedRequest
	)
	env := newServeEnv(t, nil, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil },
		enforce, frozenStableWithRecordedController, ownController,
		func(s *serveSetup) { s.config.Settings = func() *config.Config { return cfg } })
	env.upstream = recording(http.StatusOK, &sent, &mu)
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch,
		path:        "/apis/apps/v1/namespaces/apps/replicasets/stable-1?fieldManager=trial",
		contentType: "application/merge-patch+json",
		body:        []byte(`{"spec":{"replicas":5},"metadata":{"annotations":{"kausality.io/approvals":"[{\"apiVersion\":\"*\",\"kind\":\"*\",\"name\":\"*\",\"mode\":\"always\"}]"}}}`),
		user:        kcmUser}))
	mu.Lock()
	defer mu.Unlock()
	if len(sent) == 0 {
		t.Fatalf("nothing forwarded (answer %d)", rec.Code)
	}
	for _, s := range sent {
		if strings.Contains(s.body, `\"mode\":\"always\"`) {
			t.Errorf("the controller's approval of its own drift reached kube-apiserver (answer %d): %s", rec.Code, s.body)
		}
	}
}
