package intercept_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// An object of a deletecollection whose parent moved while its once
// approval was reserved is decided again on a fresh read of the parent, as
// one write is, and acting goes on from it; a parent that keeps moving
// answers a retryable 429, and nothing is deleted.
func TestDeleteCollectionDecidesAgainWhenTheParentMoved(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "approved", nil)
	for _, tc := range []struct {
		name string
		// conflicts: how many reservations meet a moved parent (0: all).
		conflicts int
		// parentReadable: how many live reads of the parent succeed
		// before one is unavailable (0: all succeed).
		parentReadable int
		wantCode       int
		wantApproval   bool
		// wantForwarded counts the dry run and the request.
		wantForwarded int64
		// wantLiveParentReads: one to confirm the verdict, and one for
		// every round after a conflict.
		wantLiveParentReads int
	}{
		{name: "moved once: decided again, the approval taken, the request forwarded", conflicts: 1,
			wantCode: http.StatusOK, wantForwarded: 2, wantLiveParentReads: 2},
		{name: "moving every round: 429, the approval stays, nothing is deleted", conflicts: 0,
			wantCode: http.StatusTooManyRequests, wantApproval: true, wantForwarded: 1, wantLiveParentReads: decision.MaxRounds},
		{name: "moved, and the fresh parent cannot be read: the failure policy answers, nothing is deleted", conflicts: 1, parentReadable: 1,
			wantCode: http.StatusServiceUnavailable, wantApproval: true, wantForwarded: 1, wantLiveParentReads: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []serveOption{enforce, withApprovedFamily, failing("patch", "deployments", tc.conflicts, conflict)}
			if tc.parentReadable > 0 {
				opts = append(opts, unreadableAfter("deployments", tc.parentReadable))
			}
			env := newServeEnv(t, nil, allowAll, opts...)
			env.upstream = answering(http.StatusOK)
			env.dyn.ClearActions()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodDelete, path: rsPath + "?labelSelector=app%3Dapproved", user: kcmUser}))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (error %v)", rec.Code, tc.wantCode, env.lastError)
			}
			if tc.wantCode == http.StatusTooManyRequests && (rec.Header().Get("Retry-After") == "" || env.lastError == nil || !strings.Contains(env.lastError.Error(), "kept changing")) {
				t.Errorf("a 429 without Retry-After or without saying what kept changing: %v %v", rec.Header(), env.lastError)
			}
			if got := env.forwarded.Load(); got != tc.wantForwarded {
				t.Errorf("forwarded %d requests, want %d", got, tc.wantForwarded)
			}
			if reads := env.liveReads("deployments"); reads != tc.wantLiveParentReads {
				t.Errorf("%d live reads of the parent, want %d", reads, tc.wantLiveParentReads)
			}
			parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if has := parent.GetAnnotations()[annotations.Approvals] == onceApproval; has != tc.wantApproval {
				t.Errorf("approval on the parent afterwards: %v, want %v", has, tc.wantApproval)
			}
		})
	}
}

// unreadableAfter makes the read of resource after the first ok
// unavailable.
func unreadableAfter(resource string, ok int) serveOption {
	return func(s *serveSetup) {
		n := 0
		s.reactors = append(s.reactors, reactor{verb: "get", resource: resource, fn: func(clienttesting.Action) (bool, runtime.Object, error) {
			if n++; n != ok+1 {
				return false, nil, nil
			}
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}})
	}
}
