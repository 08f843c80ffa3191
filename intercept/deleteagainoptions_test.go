package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// A person deleted stable-1 with propagationPolicy Orphan: kube-apiserver
// set its deletionTimestamp and the "orphan" finalizer, so the garbage
// collector keeps its dependents. Deleting it again with options changes
// it: kube-apiserver's generic registry (deletionFinalizersForGarbage-
// Collection, reached because the pending deletion has no grace period)
// rewrites the orphan/foregroundDeletion finalizers by the new options, so
// a Background (or Foreground) DELETE makes the garbage collector delete
// every dependent instead. That is no "deleting again changes nothing":
// the controller of the settled parent must not do it undecided.
func TestDeletingAgainWithAnotherPropagationIsDecided(t *testing.T) {
	orphaning := func() *unstructured.Unstructured {
		c := benchChild("stable-1", "stable", "stable-uid", 1)
		now := metav1.Now()
		c.SetDeletionTimestamp(&now)
		zero := int64(0)
		c.SetDeletionGracePeriodSeconds(&zero)
		c.SetFinalizers([]string{metav1.FinalizerOrphanDependents})
		return c
	}
	tests := []struct {
		name     string
		body     string
		wantCode int
	}{
		{"control: deleting again as it was deleted", ``, http.StatusOK},
		{"deleting again with propagationPolicy Background", `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`, http.StatusForbidden},
		{"deleting again with propagationPolicy Foreground", `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}`, http.StatusForbidden},
		{"deleting again with orphanDependents false", `{"kind":"DeleteOptions","apiVersion":"v1","orphanDependents":false}`, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
			env := newServeEnv(t, nil, allowAll, enforce, func(s *serveSetup) {
				for k, o := range s.objects {
					if m, ok := o.(*unstructured.Unstructured); ok && m.GetName() == "stable-1" {
						s.objects[k] = orphaning()
					}
				}
				s.reactors = append(s.reactors, reactor{verb: "get", resource: "replicasets", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, orphaning(), nil
				}})
			})
			w := benchWrite{method: http.MethodDelete, path: "/apis/apps/v1/namespaces/apps/replicasets/stable-1", user: kcmUser}
			if tt.body != "" {
				w.body, w.contentType = []byte(tt.body), "application/json"
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, w))
			if rec.Code != tt.wantCode {
				t.Fatalf("code %d, want %d (forwarded %d): %s (%v)", rec.Code, tt.wantCode, env.forwarded.Load(), rec.Body, env.lastError)
			}
		})
	}
}

// The same through a deletecollection, decided on its live list.
func TestDeleteCollectionAgainWithAnotherPropagationIsDecided(t *testing.T) {
	orphaning := func() *unstructured.Unstructured {
		c := benchChild("stable-1", "stable", "stable-uid", 1)
		now := metav1.Now()
		c.SetDeletionTimestamp(&now)
		zero := int64(0)
		c.SetDeletionGracePeriodSeconds(&zero)
		c.SetFinalizers([]string{metav1.FinalizerOrphanDependents})
		return c
	}
	for _, tt := range []struct {
		name, body string
		wantCode   int
	}{
		{"control: as it was deleted", ``, http.StatusOK},
		{"propagationPolicy Background", `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`, http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
			env := newServeEnv(t, nil, allowAll, enforce, selectingByName, func(s *serveSetup) {
				for k, o := range s.objects {
					if m, ok := o.(*unstructured.Unstructured); ok && m.GetName() == "stable-1" {
						s.objects[k] = orphaning()
					}
				}
			})
			w := benchWrite{method: http.MethodDelete, path: rsPath + "?fieldSelector=metadata.name%3Dstable-1", user: kcmUser}
			if tt.body != "" {
				w.body, w.contentType = []byte(tt.body), "application/json"
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, w))
			if rec.Code != tt.wantCode {
				t.Fatalf("code %d, want %d (forwarded %d): %s (%v)", rec.Code, tt.wantCode, env.forwarded.Load(), rec.Body, env.lastError)
			}
		})
	}
}
