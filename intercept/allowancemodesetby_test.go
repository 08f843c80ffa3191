package intercept_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// An allowance mode the parent's controller removed, or lowered, before
// its status writes named it does not switch off the check of its writes:
// the value before it does. The controller changes the image of its
// ReplicaSet, which no allowance covers.
func TestAnAllowanceModeTheControllerRemovedStillChecksIt(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	const patch = `{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"app","image":"evil:1"}]}}}}`
	enforceBefore := base64.RawURLEncoding.EncodeToString([]byte("enforce"))
	removed := "allowance-mode=" + controllerid.LongHash(kcmUser) + ":-:" + enforceBefore
	lowered := "allowance-mode=" + controllerid.LongHash(kcmUser) + ":" + annotations.Digest([]byte("shadow")) + ":" + enforceBefore
	for _, tc := range []struct {
		name   string
		ns     map[string]string
		parent map[string]string
		want   int
	}{
		{"the namespace says enforce", map[string]string{annotations.AllowanceMode: "enforce"}, nil, http.StatusForbidden},
		{"the controller removed the namespace's enforce", map[string]string{annotations.ModesBy: removed}, nil, http.StatusForbidden},
		{"the controller removed its parent's enforce", nil, map[string]string{annotations.ModesBy: removed}, http.StatusForbidden},
		{"the controller lowered the namespace's enforce to shadow", map[string]string{annotations.AllowanceMode: "shadow", annotations.ModesBy: lowered}, nil, http.StatusForbidden},
		{"a person removed the namespace's enforce", map[string]string{annotations.ModesBy: "allowance-mode=" + controllerid.LongHash("alice") + ":-:" + enforceBefore}, nil, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, webReplicasGrant(t), func(s *serveSetup) {
				for _, o := range s.objects {
					u, ok := o.(*unstructured.Unstructured)
					switch {
					case !ok:
					case u.GetKind() == "Namespace":
						u.SetAnnotations(tc.ns)
					case u.GetKind() == "Deployment" && u.GetName() == "web":
						a := u.GetAnnotations()
						for k, v := range tc.parent {
							a[k] = v
						}
						u.SetAnnotations(a)
					}
				}
			})
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{}`))
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/web-1?fieldManager=" + benchKCM,
				contentType: "application/merge-patch+json", body: []byte(patch), user: kcmUser}))
			if rec.Code != tc.want {
				t.Fatalf("answered %d, want %d; warnings %q; %s", rec.Code, tc.want, rec.Header().Values("Warning"), rec.Body.String())
			}
			if tc.want == http.StatusForbidden && tc.ns[annotations.AllowanceMode] != "enforce" &&
				!strings.Contains(strings.Join(rec.Header().Values("Warning"), "\n"), "made by the parent's own controller") {
				t.Errorf("no warning that the controller's change of the mode was set aside: %q", rec.Header().Values("Warning"))
			}
		})
	}
}
