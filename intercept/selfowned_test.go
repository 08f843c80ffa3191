package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/intercept"
)

// An object whose controller reference names itself has no parent whose
// change its writes could carry out. Decided under itself, a settled
// object made its own controller's next write of it drift, and every
// write extended its own trace. It is decided as an object without a
// parent: a new origin. Moving a child from its parent to itself is still
// a write under the parent it leaves.
func TestAnObjectThatControlsItselfIsDecidedWithoutParent(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	selfOwned := benchParent("loop", "loop-uid", 5, 5) // settled: its controller's writes under it are drift
	selfOwned.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "loop", UID: "loop-uid", Controller: ptr.To(true)}})
	rescaled := selfOwned.DeepCopy()
	rescaled.Object["spec"] = map[string]interface{}{"replicas": int64(4)}
	rescaledBody, err := rescaled.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	moved := benchChild("stable-1", "stable", "stable-uid", 4)
	moved.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "stable-1", UID: "stable-1-uid", Controller: ptr.To(true)}})
	movedBody, err := moved.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path, contentType string
		body                            []byte
		wantCode                        int
		wantCategory                    string
	}{
		{
			name: "a write of the object by the controller it records", method: http.MethodPut, path: "/apis/apps/v1/namespaces/apps/deployments/loop",
			contentType: "application/json", body: rescaledBody, wantCode: http.StatusOK, wantCategory: "NoParent",
		},
		{
			name: "a child moved from its settled parent to itself", method: http.MethodPut, path: rsPath + "/stable-1",
			contentType: "application/json", body: movedBody, wantCode: http.StatusForbidden, wantCategory: "DriftUnapproved",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			env := newServeEnv(t, zap.New(core), allowAll, enforce, func(s *serveSetup) { s.objects = append(s.objects, selfOwned.DeepCopy()) })
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: tc.method, path: tc.path + "?fieldManager=" + benchKCM,
				contentType: tc.contentType, body: tc.body, user: kcmUser}))
			if rec.Code != tc.wantCode {
				t.Fatalf("answered %d (%v), want %d", rec.Code, env.lastError, tc.wantCode)
			}
			fields := onlyDecisionLine(t, logs)
			if fields["category"] != tc.wantCategory {
				t.Fatalf("decided %v (%v), want %s", fields["category"], fields["reason"], tc.wantCategory)
			}
			if tc.wantCategory == "NoParent" && fields["parent"] != nil {
				t.Fatalf("decided under the parent %v, want none", fields["parent"])
			}
		})
	}
}

// onlyDecisionLine is the fields of the one decision line logs holds.
func onlyDecisionLine(t *testing.T, logs *observer.ObservedLogs) map[string]interface{} {
	t.Helper()
	lines := logs.FilterMessage(intercept.DecisionMessage).All()
	if len(lines) != 1 {
		t.Fatalf("%d decision lines, want one", len(lines))
	}
	return lines[0].ContextMap()
}
