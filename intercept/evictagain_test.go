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

// A pod of the frozen ReplicaSet "held" is terminating with a grace period
// of 30 seconds (and a finalizer). Deleting it again with a shorter grace
// period changes it (kube-apiserver's BeforeDelete moves its
// deletionTimestamp forward), so a single DELETE with gracePeriodSeconds 0
// is decided and refused. An eviction of a terminating pod is a DELETE
// with the Eviction's deleteOptions (canIgnorePDB: the PDB is skipped), so
// the same grace period there changes it the same way; its options are
// never read, and the eviction passes as "deleting again changes nothing".
func TestEvictingATerminatingPodWithAShorterGraceIsDecided(t *testing.T) {
	terminating := func() *unstructured.Unstructured {
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "held-pod", "namespace": "apps", "uid": "held-pod-uid", "resourceVersion": "300",
				"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "held", "uid": "held-uid", "controller": true}}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "registry.k8s.io/pause:3.10"}}},
		}}
		now := metav1.Now()
		p.SetDeletionTimestamp(&now)
		grace := int64(30)
		p.SetDeletionGracePeriodSeconds(&grace)
		p.SetFinalizers([]string{"example.com/hold"})
		return p
	}
	for _, tc := range []struct {
		name, method, path, body string
	}{
		{"control: a DELETE with gracePeriodSeconds 0", http.MethodDelete, "held-pod",
			`{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0}`},
		{"an eviction with gracePeriodSeconds 0", http.MethodPost, "held-pod/eviction",
			`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"held-pod","namespace":"apps"},"deleteOptions":{"gracePeriodSeconds":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
			env := newServeEnv(t, nil, allowAll, enforce, withPods, func(s *serveSetup) {
				for k, o := range s.objects {
					if m, ok := o.(*unstructured.Unstructured); ok && m.GetName() == "held-pod" {
						s.objects[k] = terminating()
					}
				}
				s.reactors = append(s.reactors, reactor{verb: "get", resource: "pods", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, terminating(), nil
				}})
			})
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
