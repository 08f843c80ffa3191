package intercept_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// kube-apiserver copies a Binding's annotations onto the pod it binds:
// one that names a kausality annotation is refused with nothing sent
// upstream; any other goes as it came.
func TestABindingMayNotCarryKausalityAnnotations(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	binding := func(annotations string) []byte {
		return []byte(`{"apiVersion":"v1","kind":"Binding","metadata":{"name":"web-0","annotations":` + annotations + `},"target":{"kind":"Node","name":"node-1"}}`)
	}
	for _, tc := range []struct {
		name, path  string
		body        []byte
		wantCode    int
		wantMessage string
	}{
		{name: "pods/binding lowering the pod's mode", path: "/api/v1/namespaces/apps/pods/web-0/binding",
			body: binding(`{"kausality.io/mode":"log"}`), wantCode: http.StatusForbidden, wantMessage: "a Binding may not carry kausality.io/mode"},
		{name: "the bindings resource forging the trace", path: "/api/v1/namespaces/apps/bindings",
			body: binding(`{"kausality.io/trace":"[]","note":"x"}`), wantCode: http.StatusForbidden, wantMessage: "a Binding may not carry kausality.io/trace"},
		{name: "allowances", path: "/api/v1/namespaces/apps/pods/web-0/binding",
			body: binding(`{"kausal.io/allowances":"[]"}`), wantCode: http.StatusForbidden, wantMessage: "kausal.io/allowances"},
		{name: "other annotations go through", path: "/api/v1/namespaces/apps/pods/web-0/binding",
			body: binding(`{"scheduler.example.com/score":"7"}`), wantCode: http.StatusOK},
		{name: "no annotations", path: "/api/v1/namespaces/apps/pods/web-0/binding",
			body: binding(`null`), wantCode: http.StatusOK},
		{name: "a pod of an excluded namespace is not decided about", path: "/api/v1/namespaces/kube-system/pods/web-0/binding",
			body: binding(`{"kausality.io/mode":"log"}`), wantCode: http.StatusOK},
		// kube-apiserver decodes a Binding into its Go type, merging the
		// two metadata members: the annotations of the first would reach
		// the pod.
		{name: "metadata twice, the annotations in the first", path: "/api/v1/namespaces/apps/pods/web-0/binding",
			body:     []byte(`{"apiVersion":"v1","kind":"Binding","metadata":{"annotations":{"kausality.io/mode":"log"}},"metadata":{"name":"web-0"},"target":{"kind":"Node","name":"node-1"}}`),
			wantCode: http.StatusBadRequest, wantMessage: `has a member twice in one object (duplicate field "metadata")`},
		{name: "a body that is no JSON", path: "/api/v1/namespaces/apps/pods/web-0/binding",
			body: []byte(`{"metadata":`), wantCode: http.StatusBadRequest, wantMessage: "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll)
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPost, path: tc.path,
				contentType: "application/json", body: tc.body, user: "system:kube-scheduler"}))
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (%s)", rec.Code, tc.wantCode, rec.Body.String())
			}
			if tc.wantCode != http.StatusOK {
				if len(sent) != 0 {
					t.Errorf("%d requests went upstream for a refused Binding", len(sent))
				}
				var status apierrors.APIStatus
				if !errors.As(env.lastError, &status) || !strings.Contains(status.Status().Message, tc.wantMessage) {
					t.Errorf("answer %v, want a Status saying %q", env.lastError, tc.wantMessage)
				}
				return
			}
			if len(sent) != 1 || sent[0].body != string(tc.body) {
				t.Errorf("the Binding was not forwarded as it came: %v", sent)
			}
		})
	}
}
