package intercept_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// What the orchestration does with the decisions about kausality.io
// annotations: a refusal sends nothing upstream, system annotations in a
// status write go upstream as stored, and a person's edit of a control is
// decided again on a live read of the object.
func TestKausalityAnnotationWrites(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	const (
		deployment = "/apis/apps/v1/namespaces/apps/deployments/stable"
		merge      = "application/merge-patch+json"
		// kube-controller-manager owns the Deployment's
		// status.observedGeneration and nobody is recorded: its field
		// manager names its controller.
		asController = "?fieldManager=kube-controller-manager"
		asPerson     = "?fieldManager=kubectl-annotate"
	)
	cases := []struct {
		name, path, body string
		wantCode         int
		wantForwarded    int64
		// wantUpstreamBody: what reached kube-apiserver contains it.
		wantUpstreamBody string
		// wantLiveReads of the Deployment by the proxy.
		wantLiveReads int
		wantMessage   string
	}{
		{
			name: "the controller approves its own drift", path: deployment + asController,
			body:     `{"metadata":{"annotations":{"kausality.io/approvals":"[]"}}}`,
			wantCode: http.StatusForbidden, wantMessage: "may not edit its own kausality.io/approvals; a person must",
		},
		{
			name: "the controller lifts a freeze through the status", path: deployment + "/status" + asController,
			body:     `{"metadata":{"annotations":{"kausality.io/freeze":null,"kausality.io/mode":"log"}}}`,
			wantCode: http.StatusForbidden, wantMessage: "may not edit its own kausality.io/mode; a person must",
		},
		{
			name: "a person sets the mode through the status", path: deployment + "/status" + asPerson,
			body:     `{"metadata":{"annotations":{"kausality.io/mode":"log"}}}`,
			wantCode: http.StatusForbidden, wantMessage: "not changed through the status subresource",
		},
		{
			name: "a status write of a system annotation goes upstream with the stored value", path: deployment + "/status" + asPerson,
			body:     `{"metadata":{"annotations":{"kausality.io/phase":"initializing"}},"status":{"replicas":1}}`,
			wantCode: http.StatusOK, wantForwarded: 1, wantUpstreamBody: `"kausality.io/phase":"initialized"`,
		},
		{
			name: "a status write without kausality.io annotations goes upstream as it came", path: deployment + "/status" + asController,
			body:     `{"metadata":{"annotations":{"example.com/x":"y"}},"status":{"replicas":1}}`,
			wantCode: http.StatusOK, wantForwarded: 1, wantUpstreamBody: `{"metadata":{"annotations":{"example.com/x":"y"}},"status":{"replicas":1}}`,
		},
		{
			name: "a person approves: decided again on a live read", path: deployment + asPerson,
			body:     `{"metadata":{"annotations":{"kausality.io/approvals":"[]"}}}`,
			wantCode: http.StatusOK, wantForwarded: 1, wantLiveReads: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll)
			var mu sync.Mutex
			var upstream []string
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				data, _ := io.ReadAll(r.Body)
				mu.Lock()
				upstream = append(upstream, string(data))
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{}`))
			}
			env.dyn.ClearActions()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: tc.path, contentType: merge,
				body: []byte(tc.body), user: "system:serviceaccount:kube-system:deployment-controller"}))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (error: %v)", rec.Code, tc.wantCode, env.lastError)
			}
			if got := env.forwarded.Load(); got != tc.wantForwarded {
				t.Errorf("forwarded %d requests, want %d: %q", got, tc.wantForwarded, upstream)
			}
			if tc.wantUpstreamBody != "" && (len(upstream) == 0 || !strings.Contains(upstream[len(upstream)-1], tc.wantUpstreamBody)) {
				t.Errorf("kube-apiserver got %q, want it to contain %s", upstream, tc.wantUpstreamBody)
			}
			if tc.wantMessage != "" {
				var status apierrors.APIStatus
				if !errors.As(env.lastError, &status) || !strings.Contains(status.Status().Message, tc.wantMessage) {
					t.Errorf("the refusal %v does not say %q", env.lastError, tc.wantMessage)
				}
			}
			if reads := env.liveReads("deployments"); reads != tc.wantLiveReads {
				t.Errorf("%d live reads of the Deployment, want %d", reads, tc.wantLiveReads)
			}
		})
	}
}
