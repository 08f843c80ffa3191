package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

// terminatingChild is stable-1 with a deletionTimestamp and a finalizer
// that holds it.
func terminatingChild(uid string) *unstructured.Unstructured {
	c := benchChild("stable-1", "stable", "stable-uid", 1)
	c.SetUID(types.UID("stable-1-" + uid))
	now := metav1.Now()
	c.SetDeletionTimestamp(&now)
	c.SetFinalizers([]string{"example.com/cleanup"})
	return c
}

// An operator deletes a child until it is gone; while a finalizer holds
// it, each repeat changes nothing, and is no drift even though the parent
// has settled. A cache may still show a deleted child after another was
// created under its name, so the repeat is decided on a live read: a
// DELETE of the new child is the drift it is.
func TestDeletingAChildThatIsBeingDeletedAgainIsNoDrift(t *testing.T) {
	replaced := benchChild("stable-1", "stable", "stable-uid", 1)
	replaced.SetUID("stable-1-new")
	tests := []struct {
		name          string
		metadataOnly  bool
		live          *unstructured.Unstructured
		wantCode      int
		wantForwarded int64
	}{
		{"the child is still being deleted", false, terminatingChild("old"), http.StatusOK, 1},
		{"the child is still being deleted, cached as metadata", true, terminatingChild("old"), http.StatusOK, 1},
		{"another child was created under its name", false, replaced, http.StatusForbidden, 0},
		{"another child was created under its name, cached as metadata", true, replaced, http.StatusForbidden, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []serveOption{enforce, func(s *serveSetup) {
				for k, o := range s.objects {
					if m, ok := o.(*unstructured.Unstructured); ok && m.GetName() == "stable-1" {
						s.objects[k] = terminatingChild("old")
					}
				}
				s.reactors = append(s.reactors, reactor{verb: "get", resource: "replicasets", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, tt.live.DeepCopy(), nil
				}})
			}}
			if tt.metadataOnly {
				opts = append(opts, replicaSetsAsChildren)
			}
			allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
			env := newServeEnv(t, nil, allowAll, opts...)
			env.dyn.ClearActions()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodDelete,
				path: "/apis/apps/v1/namespaces/apps/replicasets/stable-1", user: "system:serviceaccount:kube-system:deployment-controller"}))
			if rec.Code != tt.wantCode || env.forwarded.Load() != tt.wantForwarded {
				t.Fatalf("code %d with %d forwarded, want %d with %d: %s (%v)", rec.Code, env.forwarded.Load(), tt.wantCode, tt.wantForwarded, rec.Body, env.lastError)
			}
			if n := env.liveReads("replicasets"); n == 0 {
				t.Fatal("decided on the cache alone, which may show a child that is gone")
			}
		})
	}
}

// A deletecollection is decided on its own live list, which the request
// is pinned to: an object that list shows being deleted is deleted again
// without a read of its own.
func TestDeleteCollectionOfChildrenBeingDeletedIsNoDrift(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, enforce, selectingByName, func(s *serveSetup) {
		for k, o := range s.objects {
			if m, ok := o.(*unstructured.Unstructured); ok && m.GetName() == "stable-1" {
				s.objects[k] = terminatingChild("old")
			}
		}
	})
	env.dyn.ClearActions()
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodDelete,
		path: rsPath + "?fieldSelector=metadata.name%3Dstable-1", user: kcmUser}))
	if rec.Code != http.StatusOK || env.forwarded.Load() != 1 {
		t.Fatalf("code %d with %d forwarded, want 200 with 1: %s (%v)", rec.Code, env.forwarded.Load(), rec.Body, env.lastError)
	}
	if n := env.liveReads("replicasets"); n != 0 {
		t.Fatalf("%d reads of the object besides the list", n)
	}
}
