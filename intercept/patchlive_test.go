package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// storedAt makes the live reads of ReplicaSet stable-1 answer it at
// resourceVersion rv, while the cache still holds the version before.
func storedAt(rv string) serveOption {
	return func(s *serveSetup) {
		s.reactors = append(s.reactors, reactor{verb: "get", resource: "replicasets", fn: func(a clienttesting.Action) (bool, runtime.Object, error) {
			if a.(clienttesting.GetAction).GetName() != "stable-1" {
				return false, nil, nil
			}
			live := benchChild("stable-1", "stable", "stable-uid", 1)
			live.SetResourceVersion(rv)
			return true, live, nil
		}})
	}
}

// A JSON patch is applied to what the proxy holds of the object first. When
// it does not apply there (its test of the resourceVersion names a version
// the cache has not seen yet), it is applied to the object read live, as
// kube-apiserver applies it to the stored one, before it is refused.
func TestAPatchThatFailsOnTheCacheIsAppliedToTheStoredObject(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	cases := []struct {
		name, body string
		wantCode   int
		wantLive   int
	}{
		{"a test of a version the cache has not seen", `[{"op":"test","path":"/metadata/resourceVersion","value":"300"},{"op":"add","path":"/metadata/labels/team","value":"a"}]`,
			http.StatusOK, 1},
		{"a test that fails on the stored object too", `[{"op":"test","path":"/metadata/resourceVersion","value":"299"},{"op":"add","path":"/metadata/labels/team","value":"a"}]`,
			http.StatusUnprocessableEntity, 1},
		{"a patch that applies to the cache is not read again", `[{"op":"add","path":"/metadata/labels/team","value":"a"}]`,
			http.StatusOK, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var forwarded atomic.Int32
			env := newServeEnv(t, nil, allowAll, storedAt("300"))
			env.dyn.ClearActions()
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				forwarded.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":200}`))
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/stable-1",
				contentType: "application/json-patch+json", body: []byte(tc.body), user: "alice"}))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			if want := int32(0); tc.wantCode == http.StatusOK {
				want = 1
				if got := forwarded.Load(); got != want {
					t.Errorf("%d writes forwarded, want %d", got, want)
				}
			} else if got := forwarded.Load(); got != want {
				t.Errorf("%d writes forwarded after a refusal, want none", got)
			}
			if reads := env.liveReads("replicasets"); reads != tc.wantLive {
				t.Errorf("%d live reads of the ReplicaSet, want %d", reads, tc.wantLive)
			}
		})
	}
}

// A patch refused for its options is refused whatever the object: it is
// not read live for another try.
func TestAPatchRefusedForItsOptionsIsNotReadLive(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, storedAt("300"))
	env.dyn.ClearActions()
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/stable-1?force=true",
		contentType: "application/json-patch+json", body: []byte(`[{"op":"add","path":"/metadata/labels/team","value":"a"}]`), user: "alice"}))
	if rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("code %d, want 422: %s", rec.Code, rec.Body)
	}
	if reads := env.liveReads("replicasets"); reads != 0 {
		t.Errorf("%d live reads of the ReplicaSet for a patch refused for its options, want 0", reads)
	}
}
