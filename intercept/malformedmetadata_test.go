package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	sigsyaml "sigs.k8s.io/yaml"
)

// A whole object whose metadata kube-apiserver cannot decode (an
// annotation value that is not a string, annotations that are a list, a
// namespace or resourceVersion that is a number) is refused with
// kube-apiserver's 400, before anything is sent upstream. Forwarded, the
// proxy's edit would have dropped the caller's annotations, or put the
// URL's namespace or the cached resourceVersion in place of the caller's,
// and kube-apiserver accepted a write it refuses.
func TestWholeObjectWithMalformedMetadataIsRefusedBeforeAnythingIsSent(t *testing.T) {
	const ctrl = "system:serviceaccount:kube-system:replicaset-controller"
	rs := "/apis/apps/v1/namespaces/apps/replicasets"
	object := func(name, annotations string) string {
		return `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"` + name + `","namespace":"apps",` +
			`"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"web-uid","controller":true}],` +
			`"annotations":` + annotations + `},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}}}}}`
	}
	withMeta := func(name, meta string) string {
		return `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"` + name + `",` + meta + `,` +
			`"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"web-uid","controller":true}]},` +
			`"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}}}}}`
	}
	asYAML := func(js string) string {
		y, err := sigsyaml.JSONToYAML([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		return string(y)
	}
	for _, tc := range []struct {
		name, method, path, contentType, body, wantMessage string
	}{
		{"update, a number", http.MethodPut, rs + "/web-1?fieldManager=" + benchKCM, "application/json", object("web-1", `{"replicas":3,"team":"payments"}`),
			`metadata.annotations["replicas"] is a number, not a string`},
		{"update, a boolean", http.MethodPut, rs + "/web-1?fieldManager=" + benchKCM, "application/json", object("web-1", `{"enabled":true,"team":"payments"}`),
			`metadata.annotations["enabled"] is a boolean, not a string`},
		{"update, a list", http.MethodPut, rs + "/web-1?fieldManager=" + benchKCM, "application/json", object("web-1", `["team=payments"]`),
			`metadata.annotations is an array, not an object`},
		{"create, a number", http.MethodPost, rs + "?fieldManager=" + benchKCM, "application/json", object("web-9", `{"replicas":3,"team":"payments"}`),
			`metadata.annotations["replicas"] is a number, not a string`},
		{"update as YAML, a number", http.MethodPut, rs + "/web-1?fieldManager=" + benchKCM, "application/yaml", asYAML(object("web-1", `{"replicas":3,"team":"payments"}`)),
			`metadata.annotations["replicas"] is a number, not a string`},
		{"update, the namespace a number", http.MethodPut, rs + "/web-1?fieldManager=" + benchKCM, "application/json", withMeta("web-1", `"namespace":5,"resourceVersion":"200"`),
			`metadata.namespace is a number, not a string`},
		{"create, the namespace a number", http.MethodPost, rs + "?fieldManager=" + benchKCM, "application/json", withMeta("web-9", `"namespace":5`),
			`metadata.namespace is a number, not a string`},
		{"update as YAML, an unquoted resourceVersion", http.MethodPut, rs + "/web-1?fieldManager=" + benchKCM, "application/yaml", asYAML(withMeta("web-1", `"namespace":"apps","resourceVersion":150`)),
			`metadata.resourceVersion is a number, not a string (in YAML, quote it)`},
		{"a person's update, a number", http.MethodPut, rs + "/web-1?fieldManager=kubectl-edit", "application/json", object("web-1", `{"replicas":3,"team":"payments"}`),
			`metadata.annotations["replicas"] is a number, not a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newBenchEnv(t, nil)
			var sent atomic.Int64
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				sent.Add(1)
				echoDryRun(w, r)
			}
			user := ctrl
			if strings.Contains(tc.path, "kubectl-edit") {
				user = "alice"
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: tc.method, path: tc.path, contentType: tc.contentType, body: []byte(tc.body), user: user}))
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("code %d, want 400: %s", rec.Code, rec.Body)
			}
			if n := sent.Load(); n != 0 {
				t.Errorf("refused, but %d request(s) reached kube-apiserver", n)
			}
			if !apierrors.IsBadRequest(env.lastError) || !strings.Contains(env.lastError.Error(), tc.wantMessage) {
				t.Errorf("answered %v, want a BadRequest saying %q", env.lastError, tc.wantMessage)
			}
		})
	}
}
