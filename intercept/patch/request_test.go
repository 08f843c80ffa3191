package patch

import (
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

var deploymentKind = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

func webPatch(patchType types.PatchType, patch string) *Request {
	return &Request{Type: patchType, Patch: []byte(patch), Kind: deploymentKind, Name: "web", Namespace: "default"}
}

func TestRequestApply(t *testing.T) {
	longManager := strings.Repeat("m", 200)
	tests := []struct {
		name     string
		req      *Request
		noStored bool
		// stored, when set, is the stored object, else currentDeployment.
		stored    func(t *testing.T) *unstructured.Unstructured
		wantCode  int32
		wantValue any
		at        []string
	}{
		{name: "a merge patch applies to the stored object", req: webPatch(types.MergePatchType, `{"spec":{"replicas":5}}`),
			wantValue: int64(5), at: []string{"spec", "replicas"}},
		{name: "a JSON patch of an object that does not exist is kube-apiserver's 404", req: webPatch(types.JSONPatchType, `[{"op":"replace","path":"/spec/replicas","value":5}]`),
			noStored: true, wantCode: http.StatusNotFound},
		{name: "a field manager derived from the user agent is not validated", req: func() *Request {
			r := webPatch(types.MergePatchType, `{"spec":{"replicas":4}}`)
			r.FieldManager = longManager
			return r
		}(), wantValue: int64(4), at: []string{"spec", "replicas"}},
		{name: "a field manager the request names is validated", req: func() *Request {
			r := webPatch(types.MergePatchType, `{"spec":{"replicas":4}}`)
			r.FieldManager, r.FieldManagerNamed = longManager, true
			return r
		}(), wantCode: http.StatusUnprocessableEntity},
		{name: "force is an apply's parameter only", req: func() *Request {
			r := webPatch(types.MergePatchType, `{"spec":{"replicas":4}}`)
			force := true
			r.Force = &force
			return r
		}(), wantCode: http.StatusUnprocessableEntity},
		{name: "an apply merges containers by name, with the built-in kinds' schema", req: func() *Request {
			r := webPatch(types.ApplyYAMLPatchType, webConfig("", "app=nginx:1.26"))
			r.FieldManager, r.FieldManagerNamed = "kubectl", true
			return r
		}(), stored: func(t *testing.T) *unstructured.Unstructured {
			return mustApply(t, nil, webConfig("3", "sidecar=envoy:1.30"), Options{FieldManager: "other", TypeConverter: builtinConverter})
		}, wantValue: "sidecar=envoy:1.30,app=nginx:1.26"},
		{name: "an apply of an object that does not exist creates it", req: func() *Request {
			r := webPatch(types.ApplyYAMLPatchType, webConfig("2", "app=nginx:1.26"))
			r.FieldManager, r.FieldManagerNamed = "kubectl", true
			return r
		}(), noStored: true, wantValue: int64(2), at: []string{"spec", "replicas"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stored *unstructured.Unstructured
			switch {
			case tt.stored != nil:
				stored = tt.stored(t)
			case !tt.noStored:
				stored = currentDeployment(t)
			}
			got, err := tt.req.Apply(stored)
			if refusedAsWanted(t, err, tt.wantCode) {
				return
			}
			if tt.at == nil {
				if images := containerImages(t, got); images != tt.wantValue {
					t.Fatalf("containers %s, want %s", images, tt.wantValue)
				}
				return
			}
			if v := nested(t, got, tt.at...); v != tt.wantValue {
				t.Fatalf("%s = %v, want %v", strings.Join(tt.at, "."), v, tt.wantValue)
			}
		})
	}
}

func TestFromStoredProduce(t *testing.T) {
	scale := func(replicas any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale",
			"metadata": map[string]any{"name": "web", "namespace": "default"}, "spec": map[string]any{"replicas": replicas}}}
	}
	scalePatch := func(patchType types.PatchType, patch string) *Request {
		r := webPatch(patchType, patch)
		r.FieldManager = "kubectl"
		return r
	}
	tests := []struct {
		name     string
		write    FromStored
		wantCode int32
		// want is the value at path in the produced object.
		path []string
		want any
	}{
		{name: "a PATCH applies to the stored object", write: FromStored{Patch: webPatch(types.StrategicMergePatchType, `{"spec":{"paused":true}}`)},
			path: []string{"spec", "paused"}, want: true},
		{name: "a /scale PUT writes the stored object's spec.replicas", write: FromStored{Scale: true, ReplicasPath: ".spec.replicas", Sent: scale(int64(7))},
			path: []string{"spec", "replicas"}, want: int64(7)},
		{name: "a /scale PUT writes the replicas path it is given", write: FromStored{Scale: true, ReplicasPath: ".spec.scaling.count", Sent: scale(int64(7))},
			path: []string{"spec", "scaling", "count"}, want: int64(7)},
		{name: "a /scale PATCH applies to the Scale of the stored replicas", write: FromStored{Scale: true, ReplicasPath: ".spec.replicas",
			Patch: scalePatch(types.JSONPatchType, `[{"op":"test","path":"/spec/replicas","value":3},{"op":"replace","path":"/spec/replicas","value":4}]`)},
			path: []string{"spec", "replicas"}, want: int64(4)},
		{name: "a /scale PATCH whose test fails is kube-apiserver's 422", write: FromStored{Scale: true, ReplicasPath: ".spec.replicas",
			Patch: scalePatch(types.JSONPatchType, `[{"op":"test","path":"/spec/replicas","value":9}]`)},
			wantCode: http.StatusUnprocessableEntity},
		{name: "a /scale PUT of something other than a Scale is a 400", write: FromStored{Scale: true, ReplicasPath: ".spec.replicas",
			Sent: &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"}}},
			wantCode: http.StatusBadRequest},
		{name: "a replicas path the proxy cannot follow is a 400", write: FromStored{Scale: true, ReplicasPath: ".spec.sizes[0]", Sent: scale(int64(7))},
			wantCode: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stored := currentDeployment(t)
			got, err := tt.write.Produce(stored)
			if refusedAsWanted(t, err, tt.wantCode) {
				return
			}
			if v := nested(t, got, tt.path...); v != tt.want {
				t.Fatalf("%s = %v, want %v", strings.Join(tt.path, "."), v, tt.want)
			}
			if nested(t, stored, "spec", "replicas") != int64(3) {
				t.Fatal("the stored object was changed")
			}
		})
	}
}

func statusCode(err error) int32 {
	if status, ok := err.(apierrors.APIStatus); ok {
		return status.Status().Code
	}
	return 0
}

// A PATCH of /scale applies to the Scale kube-apiserver serves for the
// stored object, owners of the replicas field included: another manager's
// apply conflicts as it does in kube-apiserver, a forced one takes the
// field, and a merge patch writes the replicas.
func TestScalePatchSeesReplicaOwners(t *testing.T) {
	cfg := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers: [{name: app, image: nginx}]\n"
	target, err := Apply(types.ApplyYAMLPatchType, nil, []byte(cfg), Options{FieldManager: "kubectl"})
	if err != nil {
		t.Fatal(err)
	}
	target.SetUID("uid-1")
	scale, err := desired.ScaleFromTarget(target, "")
	if err != nil {
		t.Fatal(err)
	}
	if mf := scale.GetManagedFields(); len(mf) != 1 || mf[0].Manager != "kubectl" || mf[0].APIVersion != "autoscaling/v1" {
		t.Fatalf("scale managedFields %+v", mf)
	}
	scaleCfg := []byte("apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: web\n  namespace: default\nspec:\n  replicas: 5\n")
	byHPA := func(patchType types.PatchType, patch []byte) *FromStored {
		return &FromStored{Scale: true, ReplicasPath: desired.DefaultSpecReplicasPath,
			Patch: &Request{Type: patchType, Patch: patch, Kind: deploymentKind, Name: "web", Namespace: "default", FieldManager: "hpa", FieldManagerNamed: true}}
	}
	_, err = byHPA(types.ApplyYAMLPatchType, scaleCfg).Produce(target)
	if !apierrors.IsConflict(err) || err.Error() != `Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas` {
		t.Fatalf("got %v, want a conflict with kubectl", err)
	}
	forced := byHPA(types.ApplyYAMLPatchType, scaleCfg)
	forced.Patch.Force = testutil.Ptr(true)
	newTarget, err := forced.Produce(target)
	if err != nil {
		t.Fatalf("a forced apply to /scale: %v, want it to take the field as kube-apiserver does", err)
	}
	if got := nested(t, newTarget, "spec", "replicas"); got != int64(5) {
		t.Errorf("forced: spec.replicas %v, want 5", got)
	}
	newTarget, err = byHPA(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`)).Produce(target)
	if err != nil {
		t.Fatal(err)
	}
	if got := nested(t, newTarget, "spec", "replicas"); got != int64(0) {
		t.Errorf("merge patch: spec.replicas %v, want 0", got)
	}
}

// refusedAsWanted reports whether the case expects a refusal (wantCode is
// not 0), failing unless err carries that code; a case that expects a
// result fails on any error.
func refusedAsWanted(t *testing.T, err error, wantCode int32) bool {
	t.Helper()
	if wantCode != 0 {
		if code := statusCode(err); code != wantCode {
			t.Fatalf("got code %d (%v), want %d", code, err, wantCode)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}
