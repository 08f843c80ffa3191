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

// beingDeleted is obj with a deletionTimestamp, the pending grace period
// and the finalizers that hold it.
func beingDeleted(obj *unstructured.Unstructured, grace int64, finalizers ...string) *unstructured.Unstructured {
	now := metav1.Now()
	obj.SetDeletionTimestamp(&now)
	obj.SetDeletionGracePeriodSeconds(&grace)
	obj.SetFinalizers(finalizers)
	return obj
}

// terminatingChild is stable-1, being deleted under a finalizer.
func terminatingChild() *unstructured.Unstructured {
	return beingDeleted(benchChild("stable-1", "stable", "stable-uid", 1), 0, "example.com/cleanup")
}

// replacing serves cached() in place of the object of its name, and
// live() (when not nil) to live reads of resource.
func replacing(cached func() *unstructured.Unstructured, resource string, live func() *unstructured.Unstructured) serveOption {
	return func(s *serveSetup) {
		name := cached().GetName()
		for k, o := range s.objects {
			if m, ok := o.(*unstructured.Unstructured); ok && m.GetName() == name {
				s.objects[k] = cached()
			}
		}
		if live != nil {
			s.reactors = append(s.reactors, reactor{verb: "get", resource: resource, fn: func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, live(), nil
			}})
		}
	}
}

var allowEveryone = func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }

// deleteBody is a DELETE's options as its body ("" for none).
func deleteBody(w benchWrite, options string) benchWrite {
	if options != "" {
		w.body, w.contentType = []byte(options), "application/json"
	}
	return w
}

// An operator deletes a child until it is gone; while a finalizer holds
// it, each repeat changes nothing, and is no drift even though the parent
// has settled. A cache may still show a deleted child after another was
// created under its name, so the repeat is decided on a live read: a
// DELETE of the new child is the drift it is.
func TestDeletingAChildThatIsBeingDeletedAgainIsNoDrift(t *testing.T) {
	replaced := func() *unstructured.Unstructured {
		c := benchChild("stable-1", "stable", "stable-uid", 1)
		c.SetUID(types.UID("stable-1-new"))
		return c
	}
	tests := []struct {
		name          string
		metadataOnly  bool
		live          func() *unstructured.Unstructured
		wantCode      int
		wantForwarded int64
	}{
		{"the child is still being deleted", false, terminatingChild, http.StatusOK, 1},
		{"the child is still being deleted, cached as metadata", true, terminatingChild, http.StatusOK, 1},
		{"another child was created under its name", false, replaced, http.StatusForbidden, 0},
		{"another child was created under its name, cached as metadata", true, replaced, http.StatusForbidden, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []serveOption{enforce, replacing(terminatingChild, "replicasets", tt.live)}
			if tt.metadataOnly {
				opts = append(opts, replicaSetsAsChildren)
			}
			env := newServeEnv(t, nil, allowEveryone, opts...)
			env.dyn.ClearActions()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodDelete, path: rsPath + "/stable-1", user: kcmUser}))
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
	env := newServeEnv(t, nil, allowEveryone, enforce, selectingByName, replacing(terminatingChild, "", nil))
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

// A person deleted stable-1 with propagationPolicy Orphan: kube-apiserver
// set its deletionTimestamp and the "orphan" finalizer, so the garbage
// collector keeps its dependents. Deleting it again with other options
// changes it: kube-apiserver's generic registry rewrites the orphan and
// foregroundDeletion finalizers by the new options (the pending deletion
// has no grace period), so a Background or Foreground DELETE makes the
// garbage collector delete every dependent. Such a repeat is decided as
// the delete it is, alone or in a deletecollection.
func TestDeletingAgainWithAnotherPropagationIsDecided(t *testing.T) {
	orphaning := func() *unstructured.Unstructured {
		return beingDeleted(benchChild("stable-1", "stable", "stable-uid", 1), 0, metav1.FinalizerOrphanDependents)
	}
	background := `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`
	one := benchWrite{method: http.MethodDelete, path: rsPath + "/stable-1", user: kcmUser}
	collection := benchWrite{method: http.MethodDelete, path: rsPath + "?fieldSelector=metadata.name%3Dstable-1", user: kcmUser}
	tests := []struct {
		name     string
		write    benchWrite
		wantCode int
	}{
		{"control: deleting again as it was deleted", one, http.StatusOK},
		{"propagationPolicy Background", deleteBody(one, background), http.StatusForbidden},
		{"propagationPolicy Foreground", deleteBody(one, `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}`), http.StatusForbidden},
		{"orphanDependents false", deleteBody(one, `{"kind":"DeleteOptions","apiVersion":"v1","orphanDependents":false}`), http.StatusForbidden},
		{"control: a deletecollection as it was deleted", collection, http.StatusOK},
		{"a deletecollection with propagationPolicy Background", deleteBody(collection, background), http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowEveryone, enforce, selectingByName, replacing(orphaning, "replicasets", orphaning))
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, tt.write))
			if rec.Code != tt.wantCode {
				t.Fatalf("code %d, want %d (forwarded %d): %s (%v)", rec.Code, tt.wantCode, env.forwarded.Load(), rec.Body, env.lastError)
			}
		})
	}
}

// An eviction deletes the pod with the Eviction's deleteOptions: one that
// shortens a terminating pod's grace period kills a frozen ReplicaSet's
// pod at once, and is decided as the DELETE with those options would be.
func TestEvictingATerminatingPodWithAShorterGraceIsDecided(t *testing.T) {
	terminating := func() *unstructured.Unstructured {
		return beingDeleted(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "held-pod", "namespace": "apps", "uid": "held-pod-uid", "resourceVersion": "300",
				"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "held", "uid": "held-uid", "controller": true}}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "registry.k8s.io/pause:3.10"}}},
		}}, 30, "example.com/hold")
	}
	for _, tc := range []struct{ name, method, path, body string }{
		{"control: a DELETE with gracePeriodSeconds 0", http.MethodDelete, "held-pod",
			`{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0}`},
		{"an eviction with gracePeriodSeconds 0", http.MethodPost, "held-pod/eviction",
			`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"held-pod","namespace":"apps"},"deleteOptions":{"gracePeriodSeconds":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowEveryone, enforce, withPods, replacing(terminating, "pods", terminating))
			r := env.request(t, benchWrite{method: tc.method, path: "/api/v1/namespaces/apps/pods/" + tc.path,
				contentType: "application/json", body: []byte(tc.body), user: "bob"})
			r.Header.Set("User-Agent", kubectlUA)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			if rec.Code != http.StatusForbidden {
				t.Fatalf("code %d, want 403: the frozen ReplicaSet's terminating pod is killed at once (forwarded %d): %s (%v)", rec.Code, env.forwarded.Load(), rec.Body, env.lastError)
			}
		})
	}
}
