package intercept_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

var (
	sprocketsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "sprockets"}
	crdsGVR      = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// withSprockets serves example.com/v1 Sprockets, whose CRD keeps the
// replicas of its scale subresource at scalePath ("" for no scale
// subresource), and adds Sprocket "s" with spec.size 2 (and a spec.replicas
// that means something else) under the frozen Deployment.
func withSprockets(scalePath string) serveOption {
	return func(s *serveSetup) {
		s.resources = append(s.resources, servedResource{gvr: sprocketsGVR, listKind: "SprocketList",
			resource: metav1.APIResource{Name: "sprockets", Namespaced: true, Kind: "Sprocket", Verbs: metav1.Verbs{"get", "list", "watch", "update", "patch"}}})
		version := map[string]any{"name": "v1", "served": true, "storage": true}
		if scalePath != "" {
			version["subresources"] = map[string]any{"scale": map[string]any{"specReplicasPath": scalePath, "statusReplicasPath": ".status.size"}}
		}
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": "sprockets.example.com", "resourceVersion": "1"},
			"spec":     map[string]any{"group": "example.com", "versions": []any{version}},
		}}
		sprocket := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Sprocket",
			"metadata": map[string]any{"name": "s", "namespace": "apps", "uid": "s-uid", "resourceVersion": "400", "generation": int64(1),
				"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "frozen", "uid": "frozen-uid", "controller": true}}},
			"spec": map[string]any{"size": int64(2), "replicas": int64(7)},
		}}
		s.objects = append(s.objects, crd, sprocket)
	}
}

func scaleBody(name string, replicas int) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":%q,"namespace":"apps"},"spec":{"replicas":%d}}`, name, replicas))
}

// A custom resource's /scale is decided on the field its CRD names, not on
// spec.replicas.
func TestCustomResourceScaleWritesTheCRDsReplicasPath(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	scalePath := "/apis/example.com/v1/namespaces/apps/sprockets/s/scale"
	for _, tc := range []struct {
		name     string
		opts     []serveOption
		method   string
		ct       string
		body     []byte
		wantCode int
		// wantChanged is the field a refusal names as changed.
		wantChanged string
	}{
		{name: "the size it has: no desired change, allowed under a freeze", opts: []serveOption{withSprockets(".spec.size")},
			method: http.MethodPut, ct: "application/json", body: scaleBody("s", 2), wantCode: http.StatusOK},
		{name: "a new size: a change of spec.size, frozen", opts: []serveOption{withSprockets(".spec.size")},
			method: http.MethodPut, ct: "application/json", body: scaleBody("s", 3), wantCode: http.StatusForbidden, wantChanged: "spec.size"},
		{name: "a patch to /scale applies to the Scale of spec.size", opts: []serveOption{withSprockets(".spec.size")},
			method: http.MethodPatch, ct: "application/merge-patch+json", body: []byte(`{"spec":{"replicas":3}}`), wantCode: http.StatusForbidden, wantChanged: "spec.size"},
		{name: "the same patch with the size it has", opts: []serveOption{withSprockets(".spec.size")},
			method: http.MethodPatch, ct: "application/merge-patch+json", body: []byte(`{"spec":{"replicas":2}}`), wantCode: http.StatusOK},
		{name: "a CRD that keeps its replicas at spec.replicas", opts: []serveOption{withSprockets(".spec.replicas")},
			method: http.MethodPut, ct: "application/json", body: scaleBody("s", 7), wantCode: http.StatusOK},
		{name: "no scale subresource: kube-apiserver's 404", opts: []serveOption{withSprockets("")},
			method: http.MethodPut, ct: "application/json", body: scaleBody("s", 3), wantCode: http.StatusNotFound},
		{name: "the CRD cannot be read: --failure-policy=Fail", opts: []serveOption{withSprockets(".spec.size"),
			failing("get", "customresourcedefinitions", 0, apierrors.NewServiceUnavailable("etcd is down"))},
			method: http.MethodPut, ct: "application/json", body: scaleBody("s", 2), wantCode: http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, append([]serveOption{enforce, withFrozenFamily(0)}, tc.opts...)...)
			env.upstream = scaleDryRun
			r := env.request(t, benchWrite{method: tc.method, path: scalePath, contentType: tc.ct, body: tc.body, user: "alice"})
			r.Header.Set("User-Agent", kubectlUA)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (error %v)", rec.Code, tc.wantCode, env.lastError)
			}
			if tc.wantChanged == "" {
				return
			}
			var status apierrors.APIStatus
			if !errors.As(env.lastError, &status) {
				t.Fatalf("%v is no Status", env.lastError)
			}
			var changed []string
			for _, c := range status.Status().Details.Causes {
				if c.Type == "KausalityChangedField" {
					changed = append(changed, c.Field)
				}
			}
			if strings.Join(changed, ",") != tc.wantChanged {
				t.Errorf("changed fields %v, want %s", changed, tc.wantChanged)
			}
		})
	}
}

// The replicas path is read from the CRD once, not for every write.
func TestCustomResourceScaleReadsTheCRDOnce(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, enforce, withFrozenFamily(0), withSprockets(".spec.size"))
	env.upstream = echoDryRun
	env.dyn.ClearActions()
	for range 3 {
		r := env.request(t, benchWrite{method: http.MethodPut, path: "/apis/example.com/v1/namespaces/apps/sprockets/s/scale",
			contentType: "application/json", body: scaleBody("s", 2), user: "alice"})
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Fatalf("code %d (error %v)", rec.Code, env.lastError)
		}
	}
	reads := 0
	for _, a := range env.dyn.Actions() {
		if a.GetVerb() == "get" && a.GetResource() == crdsGVR {
			reads++
		}
	}
	if reads != 1 {
		t.Errorf("%d reads of the CRD for three writes, want 1", reads)
	}
}

// A /scale write's trace lands on the scaled object: the Scale body has no
// room for it, so the proxy writes it after the write succeeded, while the
// object's desired state is still the one the write produced.
func TestScaleWriteLeavesATrace(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name string
		// later changes the Deployment after the scale, as another writer
		// would before the trace lands.
		later     func(*unstructured.Unstructured)
		wantTrace bool
	}{
		{name: "the trace lands", wantTrace: true},
		{name: "a later spec change carries its own trace: none is put over it", wantTrace: false,
			later: func(d *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(d.Object, int64(10), "spec", "minReadySeconds")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, enforce)
			ctx := context.Background()
			deployments := env.dyn.Resource(deploymentsGVR).Namespace("apps")
			// kube-apiserver stores the scale.
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				d, err := deployments.Get(ctx, "stable", metav1.GetOptions{})
				if err == nil {
					_ = unstructured.SetNestedField(d.Object, int64(5), "spec", "replicas")
					d.SetGeneration(d.GetGeneration() + 1)
					if tc.later != nil {
						tc.later(d)
					}
					_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
				}
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(scaleBody("stable", 5))
			}
			env.dyn.ClearActions()
			r := env.request(t, benchWrite{method: http.MethodPut, path: "/apis/apps/v1/namespaces/apps/deployments/stable/scale",
				contentType: "application/json", body: scaleBody("stable", 5), user: "carol"})
			r.Header.Set("User-Agent", kubectlUA)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d (error %v)", rec.Code, env.lastError)
			}
			var trace string
			wait := 5 * time.Second
			if !tc.wantTrace {
				// The proxy looks at the object once and is done.
				wait = 500 * time.Millisecond
			}
			for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if d, err := deployments.Get(ctx, "stable", metav1.GetOptions{}); err == nil {
					if v := d.GetAnnotations()[annotations.Trace]; strings.Contains(v, `"user":"carol"`) {
						trace = v
						break
					}
				}
			}
			if (trace != "") != tc.wantTrace {
				t.Fatalf("trace %q, want one: %v", trace, tc.wantTrace)
			}
			if !tc.wantTrace {
				for _, a := range env.dyn.Actions() {
					if a.GetVerb() == "patch" {
						t.Errorf("the proxy patched %s", a.GetResource())
					}
				}
				return
			}
			var hops []map[string]any
			if err := json.Unmarshal([]byte(trace), &hops); err != nil || len(hops) != 1 {
				t.Fatalf("trace %s: %v", trace, err)
			}
			if hops[0]["kind"] != "Deployment" || hops[0]["name"] != "stable" || hops[0]["generation"] != float64(6) {
				t.Errorf("hop %v, want carol's scale of Deployment stable at generation 6", hops[0])
			}
			d, _ := deployments.Get(ctx, "stable", metav1.GetOptions{})
			if replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); replicas != 5 {
				t.Errorf("the trace write changed replicas to %d", replicas)
			}
			for _, a := range env.dyn.Actions() {
				if a.GetVerb() == "patch" && !strings.Contains(string(a.(interface{ GetPatch() []byte }).GetPatch()), `"resourceVersion"`) {
					t.Errorf("the trace write has no resourceVersion precondition: %s", a.(interface{ GetPatch() []byte }).GetPatch())
				}
			}
		})
	}
}

// scaleDryRun answers a dry run of a /scale write as kube-apiserver does,
// with the Scale it would store: the body's replicas (a Scale, or a merge
// patch of one).
func scaleDryRun(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("dryRun") == "" {
		echoDryRun(w, r)
		return
	}
	data, _ := io.ReadAll(r.Body)
	var sent struct {
		Spec struct {
			Replicas int `json:"replicas"`
		} `json:"spec"`
	}
	_ = json.Unmarshal(data, &sent)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(scaleBody("s", sent.Spec.Replicas))
}
