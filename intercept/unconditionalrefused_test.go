package intercept_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

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

// The proxy's cache may still hold an object deleted a moment ago. For
// its update without resourceVersion kube-apiserver answers 404, which a
// controller answers by creating the object, where it retries a 422: the
// proxy refuses such an update only once a live read finds the object,
// and otherwise leaves the answer to kube-apiserver.
func TestAnUpdateWithoutVersionOfAnObjectDeletedSinceTheCacheSawItGoesUpstream(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name        string
		deleted     bool
		wantRefused bool
	}{
		{name: "deleted since the cache saw it", deleted: true},
		{name: "still stored", wantRefused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var liveReads atomic.Int32
			env := newServeEnv(t, nil, allowAll, withBudget, func(s *serveSetup) {
				s.cachedAsChildren = append(s.cachedAsChildren, pdbsGVR)
				s.reactors = append(s.reactors, reactor{verb: "get", resource: "poddisruptionbudgets", fn: func(a clienttesting.Action) (bool, runtime.Object, error) {
					liveReads.Add(1)
					if tc.deleted {
						return true, nil, apierrors.NewNotFound(pdbsGVR.GroupResource(), a.(clienttesting.GetAction).GetName())
					}
					return false, nil, nil
				}})
			})
			forwarded := answeringEmpty(env)
			body := []byte(`{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"web","namespace":"apps"},"spec":{"maxUnavailable":2}}`)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut, path: "/apis/policy/v1/namespaces/apps/poddisruptionbudgets/web?fieldManager=operator",
				contentType: "application/json", body: body, user: "someone"}))
			if n := liveReads.Load(); n != 1 {
				t.Fatalf("read the PodDisruptionBudget live %d times, want once", n)
			}
			if tc.wantRefused {
				if rec.Code != http.StatusUnprocessableEntity || len(*forwarded) != 0 {
					t.Fatalf("answered %d after forwarding %d writes, want 422 and nothing upstream", rec.Code, len(*forwarded))
				}
				return
			}
			if len(*forwarded) != 1 {
				t.Fatalf("answered %d (%v) after forwarding %d writes, want the update forwarded for kube-apiserver to answer", rec.Code, env.lastError, len(*forwarded))
			}
			var sent map[string]any
			if err := json.Unmarshal([]byte((*forwarded)[0]), &sent); err != nil {
				t.Fatal(err)
			}
			if rv, found, _ := unstructured.NestedString(sent, "metadata", "resourceVersion"); found {
				t.Fatalf("forwarded the update pinned to resourceVersion %q, want it without one, as it came", rv)
			}
		})
	}
}
