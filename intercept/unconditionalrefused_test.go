package intercept_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/config"
)

var pdbsGVR = schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}

// withBudget serves PodDisruptionBudgets, with the budget "web", besides
// the Gadgets of withGadgets (a custom resource).
func withBudget(s *serveSetup) {
	withGadgets(s)
	verbs := metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}
	s.resources = append(s.resources,
		servedResource{gvr: pdbsGVR, listKind: "PodDisruptionBudgetList", resource: metav1.APIResource{Name: "poddisruptionbudgets", Namespaced: true, Kind: "PodDisruptionBudget", Verbs: verbs}})
	s.objects = append(s.objects, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
		"metadata": map[string]any{"name": "web", "namespace": "apps", "uid": "web-uid", "resourceVersion": "500", "generation": int64(1)},
		"spec":     map[string]any{"maxUnavailable": int64(1)},
	}})
}

// kube-apiserver refuses an update that names no resourceVersion of a
// custom resource, or of a built-in kind whose strategy says so (a
// PodDisruptionBudget): the caller read nothing, and would overwrite what
// others wrote. The proxy pins the writes it decides to the version it
// read; for these kinds that would make the refused update land. So it
// answers as kube-apiserver does, and sends nothing upstream. An update
// that names a version, and an unconditional update of a kind that allows
// one, are forwarded as before.
func TestAnUpdateWithoutVersionOfAKindThatNeedsOneIsRefusedAsKubeAPIServerDoes(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name, path, apiVersion, kind, object, version string
		wantRefused                                   bool
		wantMessage                                   string
	}{
		{
			name: "custom resource, no resourceVersion", path: "/apis/example.com/v1/namespaces/apps/gadgets/recorded",
			apiVersion: "example.com/v1", kind: "Gadget", object: "recorded", wantRefused: true,
			wantMessage: `gadgets.example.com "recorded" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update`,
		},
		{
			name: "custom resource, resourceVersion 0", path: "/apis/example.com/v1/namespaces/apps/gadgets/recorded",
			apiVersion: "example.com/v1", kind: "Gadget", object: "recorded", version: "0", wantRefused: true,
			wantMessage: `gadgets.example.com "recorded" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update`,
		},
		{
			// Gadgets have no status subresource: kube-apiserver's 404.
			name: "custom resource's status, no status subresource", path: "/apis/example.com/v1/namespaces/apps/gadgets/recorded/status",
			apiVersion: "example.com/v1", kind: "Gadget", object: "recorded",
		},
		{
			name: "PodDisruptionBudget's status, no resourceVersion", path: "/apis/policy/v1/namespaces/apps/poddisruptionbudgets/web/status",
			apiVersion: "policy/v1", kind: "PodDisruptionBudget", object: "web", wantRefused: true,
			wantMessage: `poddisruptionbudgets.policy "web" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update`,
		},
		{
			name: "PodDisruptionBudget, no resourceVersion", path: "/apis/policy/v1/namespaces/apps/poddisruptionbudgets/web",
			apiVersion: "policy/v1", kind: "PodDisruptionBudget", object: "web", wantRefused: true,
			wantMessage: `poddisruptionbudgets.policy "web" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update`,
		},
		{
			name: "custom resource, its stored resourceVersion", path: "/apis/example.com/v1/namespaces/apps/gadgets/recorded",
			apiVersion: "example.com/v1", kind: "Gadget", object: "recorded", version: "400",
		},
		{
			name: "PodDisruptionBudget, its stored resourceVersion", path: "/apis/policy/v1/namespaces/apps/poddisruptionbudgets/web",
			apiVersion: "policy/v1", kind: "PodDisruptionBudget", object: "web", version: "500",
		},
		{
			name: "custom resource that does not exist: kube-apiserver's 404 comes first", path: "/apis/example.com/v1/namespaces/apps/gadgets/absent",
			apiVersion: "example.com/v1", kind: "Gadget", object: "absent",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, withBudget)
			forwarded := answeringEmpty(env)
			meta := map[string]any{"name": tc.object, "namespace": "apps"}
			if tc.version != "" {
				meta["resourceVersion"] = tc.version
			}
			body, err := json.Marshal(map[string]any{"apiVersion": tc.apiVersion, "kind": tc.kind, "metadata": meta,
				"spec": map[string]any{"size": int64(2)}})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut, path: tc.path + "?fieldManager=operator",
				contentType: "application/json", body: body, user: "someone"}))
			if !tc.wantRefused {
				if len(*forwarded) != 1 {
					t.Fatalf("answered %d %s after forwarding %d writes, want the write forwarded", rec.Code, rec.Body.String(), len(*forwarded))
				}
				return
			}
			if len(*forwarded) != 0 {
				t.Fatalf("forwarded %d writes upstream, want none: %q", len(*forwarded), *forwarded)
			}
			// The test env's error writer sends the code only; the proxy's
			// writes the Status (proxy's tests).
			var apiStatus apierrors.APIStatus
			if !errors.As(env.lastError, &apiStatus) {
				t.Fatalf("answered %d with %v, want kube-apiserver's Status", rec.Code, env.lastError)
			}
			status := apiStatus.Status()
			if rec.Code != http.StatusUnprocessableEntity || status.Reason != metav1.StatusReasonInvalid || status.Message != tc.wantMessage {
				t.Fatalf("answered %d %s %q, want 422 Invalid %q", rec.Code, status.Reason, status.Message, tc.wantMessage)
			}
			if status.Details == nil || len(status.Details.Causes) != 1 || status.Details.Causes[0].Field != "metadata.resourceVersion" {
				t.Fatalf("details %+v, want the one cause of kube-apiserver, on metadata.resourceVersion", status.Details)
			}
		})
	}
}

// A controller in shadow mode is never made to fail by the proxy: its
// update of a custom resource without resourceVersion goes upstream as it
// came, without the proxy's precondition, and kube-apiserver refuses it
// as it would have without the proxy.
func TestAShadowUpdateWithoutVersionOfAKindThatNeedsOneGoesUpstreamAsItCame(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: onboarding\n  match:\n    user: operator\n  mode: shadow\n"))
	if err != nil {
		t.Fatal(err)
	}
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, withBudget, func(s *serveSetup) { s.config.Settings = func() *config.Config { return cfg } })
	forwarded := answeringEmpty(env)
	body := []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"recorded","namespace":"apps"},"spec":{"size":2}}`)
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut, path: "/apis/example.com/v1/namespaces/apps/gadgets/recorded?fieldManager=operator",
		contentType: "application/json", body: body, user: "operator"}))
	if len(*forwarded) != 1 || (*forwarded)[0] != string(body) {
		t.Fatalf("answered %d after forwarding %q, want the update forwarded as it came", rec.Code, *forwarded)
	}
}
