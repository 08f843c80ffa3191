package intercept_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// A controller's write that an allowance justifies is checked on the
// mutations it makes to the proxy's copy of the child. A copy a beat
// behind may lack a person's edit that the write reverts: the write names
// the template as the copy holds it, which counts as unchanged. So it
// lands on the copy's version; when the child has moved, kube-apiserver
// refuses it, and it is decided again on the child read live, where the
// revert is a mutation no allowance covers.
func TestAWriteAnAllowanceJustifiesLandsOnTheVersionItWasCheckedOn(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	const patch = `{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"app","image":"registry.k8s.io/pause:3.10","ports":[{"containerPort":8080,"protocol":"TCP"}]}]}}}}`
	for _, tc := range []struct {
		name     string
		moved    bool
		wantCode int
	}{
		{name: "the copy is the stored child", wantCode: http.StatusOK},
		{name: "a person changed the image since the copy", moved: true, wantCode: http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, webReplicasGrant(t), withNamespaceAllowanceMode("enforce"), func(s *serveSetup) {
				for _, o := range s.objects {
					if u, ok := o.(*unstructured.Unstructured); ok && u.GetName() == "web-1" {
						a := u.GetAnnotations()
						a[annotations.Updaters] = "1l4sq,1likq"
						u.SetAnnotations(a)
					}
				}
				if tc.moved {
					// What a live read finds: the person's new image, at a
					// newer version than the cache's.
					s.reactors = append(s.reactors, reactor{verb: "get", resource: "replicasets", fn: func(a clienttesting.Action) (bool, runtime.Object, error) {
						if a.(clienttesting.GetAction).GetName() != "web-1" {
							return false, nil, nil
						}
						live := benchChild("web-1", "web", "web-uid", 2)
						live.SetResourceVersion("201")
						live.SetAnnotations(map[string]string{"deployment.kubernetes.io/revision": "1", annotations.Updaters: "1l4sq,1likq"})
						containers, _, _ := unstructured.NestedSlice(live.Object, "spec", "template", "spec", "containers")
						containers[0].(map[string]interface{})["image"] = "registry.k8s.io/pause:3.11"
						_ = unstructured.SetNestedSlice(live.Object, containers, "spec", "template", "spec", "containers")
						return true, live, nil
					}})
				}
			})
			var (
				mu        sync.Mutex
				forwarded []string
			)
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				forwarded = append(forwarded, string(b))
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				if tc.moved && strings.Contains(string(b), `"resourceVersion":"200"`) {
					w.WriteHeader(http.StatusConflict)
					_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on replicasets.apps \"web-1\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"web-1","group":"apps","kind":"replicasets"},"code":409}`))
					return
				}
				_, _ = w.Write([]byte(`{}`))
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/web-1?fieldManager=" + benchKCM,
				contentType: "application/merge-patch+json", body: []byte(patch), user: kcmUser}))
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != tc.wantCode {
				t.Fatalf("answered %d (%v), want %d; forwarded %q", rec.Code, env.lastError, tc.wantCode, forwarded)
			}
			if len(forwarded) == 0 || !strings.Contains(forwarded[0], `"resourceVersion":"200"`) {
				t.Fatalf("forwarded %q, want the write pinned to the copy's resourceVersion 200", forwarded)
			}
			if tc.moved && len(forwarded) != 1 {
				t.Fatalf("forwarded %d writes, want only the refused pinned one: %q", len(forwarded), forwarded)
			}
		})
	}
}
