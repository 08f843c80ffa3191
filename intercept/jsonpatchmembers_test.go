package intercept_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// jsonPatchingUpstream answers JSON patches as kube-apiserver does: it
// applies them with the library kube-apiserver uses to the stored object
// (stored), answers a dry run with the result and records the result of a
// real write in *written.
func jsonPatchingUpstream(t *testing.T, stored *unstructured.Unstructured, written *[]map[string]interface{}, mu *sync.Mutex) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		doc, _ := json.Marshal(stored.Object)
		ops, err := jsonpatch.DecodePatch(data)
		if err != nil {
			t.Errorf("kube-apiserver could not decode the forwarded patch: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		out, err := ops.Apply(doc)
		if err != nil {
			t.Logf("kube-apiserver could not apply the forwarded patch %s: %v", data, err)
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		var result map[string]interface{}
		_ = json.Unmarshal(out, &result)
		if r.URL.Query().Get("dryRun") == "" {
			mu.Lock()
			*written = append(*written, result)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}
}

// patchAsDeploymentController sends the deployment controller's JSON patch
// op of ReplicaSet name, which kube-apiserver stores as stored, to the
// proxy in enforce mode, with ReplicaSets cached as children, and returns
// the answer and what kube-apiserver stored.
func patchAsDeploymentController(t *testing.T, stored *unstructured.Unstructured, name, op string) (*httptest.ResponseRecorder, []map[string]interface{}, *benchEnv) {
	t.Helper()
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, enforce, replicaSetsAsChildren)
	var (
		mu      sync.Mutex
		written []map[string]interface{}
	)
	env.upstream = jsonPatchingUpstream(t, stored, &written, &mu)
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch,
		path:        "/apis/apps/v1/namespaces/apps/replicasets/" + name + "?fieldManager=kube-controller-manager",
		contentType: "application/json-patch+json", body: []byte(op),
		user: "system:serviceaccount:kube-system:deployment-controller"}))
	mu.Lock()
	defer mu.Unlock()
	return rec, written, env
}

// A JSON patch operation is read by kube-apiserver (evanphx/json-patch v4)
// as a map: only the exact member "path" counts. A Go struct matches
// member names case-insensitively, so a decoy "Path" member could make an
// operation look as if it touched another path than the one kube-apiserver
// applies. For a child cached as metadata only, the controller of a
// settled parent would so change the child's desired state as if its
// patch touched only metadata: drift through in enforce mode, undecided.
func TestADecoyPathMemberOfAJSONPatchDoesNotHideDrift(t *testing.T) {
	stored := benchChild("stable-1", "stable", "stable-uid", 1)
	spec, _ := json.Marshal(benchChild("stable-1", "stable", "stable-uid", 7).Object["spec"])
	for _, tc := range []struct {
		name string
		op   string
	}{
		// Control: the same operation without the decoy is drift, held.
		{"plain", `[{"op":"add","path":"/spec","value":` + string(spec) + `}]`},
		{"decoy Path member", `[{"op":"add","path":"/spec","value":` + string(spec) + `,"Path":"/metadata/labels/decoy"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, written, env := patchAsDeploymentController(t, stored, "stable-1", tc.op)
			if rec.Code != http.StatusForbidden || len(written) != 0 {
				replicas := interface{}(nil)
				if len(written) > 0 {
					replicas, _, _ = unstructured.NestedFieldNoCopy(written[0], "spec", "replicas")
				}
				t.Fatalf("the settled parent's controller scaled its child (code %d, stored spec.replicas %v, error %v); want 403 DriftUnapproved in enforce mode",
					rec.Code, replicas, env.lastError)
			}
		})
	}
}

// The same decoy during an Expected window (a verdict that stands on the
// child's cached metadata): the parent's controller writes a child's
// kausality.io annotations, which the proxy keeps as stored on every
// controller write. It lowers the child's own mode and forges the system
// annotation kausal.io/allowances.
func TestADecoyPathMemberOfAJSONPatchDoesNotWriteProtectedAnnotations(t *testing.T) {
	stored := benchChild("web-1", "web", "web-uid", 1)
	for _, tc := range []struct {
		name, op, key, value string
	}{
		{"control: the child's mode, plain", `[{"op":"add","path":"/metadata/annotations/kausality.io~1mode","value":"log"}]`, "kausality.io/mode", "log"},
		{"the child's mode", `[{"op":"add","path":"/metadata/annotations/kausality.io~1mode","value":"log","Path":"/spec/replicas"}]`, "kausality.io/mode", "log"},
		{"allowances", `[{"op":"add","path":"/metadata/annotations/kausal.io~1allowances","value":"[{\"forged\":true}]","Path":"/spec/replicas"}]`, "kausal.io/allowances", `[{"forged":true}]`},
		{"controllers", `[{"op":"add","path":"/metadata/annotations/kausality.io~1controllers","value":"zzzzzzzzzzzzzzzz","Path":"/spec/replicas"}]`, "kausality.io/controllers", "zzzzzzzzzzzzzzzz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, written, _ := patchAsDeploymentController(t, stored, "web-1", tc.op)
			for _, obj := range written {
				got, _, _ := unstructured.NestedString(obj, "metadata", "annotations", tc.key)
				if got == tc.value {
					t.Fatalf("the parent's controller stored %s=%q on its child (code %d); the proxy keeps kausality annotations as stored on controller writes",
						tc.key, got, rec.Code)
				}
			}
		})
	}
}

// kube-apiserver's JSON patch library drops whatever comes before a
// path's first "/": "metadata/spec/replicas" addresses /spec/replicas, and
// "spec/metadata/annotations/k" addresses /metadata/annotations/k. Read as
// written, the first would look like a change of metadata alone (no
// desired change: the settled parent's controller scales its child
// undecided), and the second like a change of the spec, leaving the
// annotations it writes unseen.
func TestAJSONPatchPathWithoutItsLeadingSlashIsReadAsKubeAPIServerReadsIt(t *testing.T) {
	t.Run("a change of the spec under a path that starts with metadata", func(t *testing.T) {
		stored := benchChild("stable-1", "stable", "stable-uid", 1)
		for _, op := range []string{
			`[{"op":"replace","path":"/spec/replicas","value":7}]`, // control
			`[{"op":"replace","path":"metadata/spec/replicas","value":7}]`,
			`[{"op":"replace","path":"status/spec/replicas","value":7}]`,
		} {
			rec, written, env := patchAsDeploymentController(t, stored, "stable-1", op)
			if rec.Code != http.StatusForbidden || len(written) != 0 {
				t.Fatalf("%s: the settled parent's controller scaled its child (code %d, %d writes stored, error %v); want 403 DriftUnapproved in enforce mode",
					op, rec.Code, len(written), env.lastError)
			}
		}
	})
	t.Run("protected annotations under a path that starts with spec", func(t *testing.T) {
		stored := benchChild("web-1", "web", "web-uid", 1)
		for _, tc := range []struct{ op, key, value string }{
			{`[{"op":"add","path":"/metadata/annotations/kausality.io~1mode","value":"log"}]`, "kausality.io/mode", "log"}, // control
			{`[{"op":"add","path":"spec/metadata/annotations/kausality.io~1mode","value":"log"}]`, "kausality.io/mode", "log"},
			{`[{"op":"add","path":"spec/metadata/annotations/kausal.io~1allowances","value":"[{\"forged\":true}]"}]`, "kausal.io/allowances", `[{"forged":true}]`},
			{`[{"op":"add","path":"x/metadata/annotations/kausality.io~1controllers","value":"zzzzzzzzzzzzzzzz"}]`, "kausality.io/controllers", "zzzzzzzzzzzzzzzz"},
			{`[{"op":"replace","path":"x/metadata/annotations","value":{"kausality.io/mode":"log"}}]`, "kausality.io/mode", "log"},
		} {
			rec, written, _ := patchAsDeploymentController(t, stored, "web-1", tc.op)
			for _, obj := range written {
				got, _, _ := unstructured.NestedString(obj, "metadata", "annotations", tc.key)
				if got == tc.value {
					t.Fatalf("%s: the parent's controller stored %s=%q on its child (code %d); the proxy keeps kausality annotations as stored on controller writes",
						tc.op, tc.key, got, rec.Code)
				}
			}
		}
	})
}
