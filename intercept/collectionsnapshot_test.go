package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// A deletecollection that names an exact resourceVersion, or continues a
// list, is not pinned to the proxy's list: kube-apiserver lists at the
// caller's version, which may be long past, and deletes each name it
// lists as it is now, by name. Each listed name is decided as the object
// it names now: an old list that shows the name terminating (a delete of
// it would change nothing), or without a parent, must not delete the
// frozen parent's child that has the name now.
func TestADeleteCollectionAtAnOldVersionDecidesTheObjectsAsTheyAreNow(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	// The list at the caller's version: frozen-1 as an earlier object of
	// that name, terminating, and gone-1, which no longer exists.
	oldList := func(s *serveSetup) {
		s.reactors = append(s.reactors, reactor{verb: "list", resource: "replicasets", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
			list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSetList",
				"metadata": map[string]any{"resourceVersion": "4711"}}}
			earlier := benchChild("frozen-1", "frozen", "frozen-uid", 1)
			earlier.SetUID("earlier-uid")
			now := metav1.Now()
			earlier.SetDeletionTimestamp(&now)
			earlier.SetFinalizers([]string{"example.com/hold"})
			orphan := benchChild("gone-1", "frozen", "frozen-uid", 1)
			orphan.SetOwnerReferences(nil)
			list.Items = append(list.Items, *earlier, *orphan)
			return true, list, nil
		}})
	}
	for _, tc := range []struct {
		name, query string
		wantCode    int
	}{
		{name: "an exact version", query: "resourceVersion=4711&resourceVersionMatch=Exact", wantCode: http.StatusForbidden},
		{name: "a continued list", query: "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDcxMSwic3RhcnQiOiJmcm96ZW4tMFx1MDAwMCJ9", wantCode: http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowAll, enforce, withFrozenFamily(1), oldList)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			r := env.request(t, benchWrite{method: http.MethodDelete, path: rsPath + "?" + tc.query, user: "alice", body: []byte(`{}`), contentType: "application/json"})
			r.Header.Set("User-Agent", kubectlUA)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != tc.wantCode || len(sent) != 0 {
				t.Fatalf("code %d with %d forwarded (%v), want %d and nothing upstream: the frozen parent's child frozen-1 is what kube-apiserver would delete",
					rec.Code, len(sent), env.lastError, tc.wantCode)
			}
			if n := env.liveReads("replicasets"); n < 2 {
				t.Fatalf("read %d listed names as they are now, want both", n)
			}
		})
	}
}
