package escalation

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

var deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "apps", Version: "v1"}})
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	return m
}

func TestDynamicParentEditor(t *testing.T) {
	webRef := decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"}
	approve := func(obj *unstructured.Unstructured) (annotations.Edit, error) {
		return annotations.AddApproval(obj.GetAnnotations()[annotations.Approvals],
			annotations.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-6d4", Generation: obj.GetGeneration()},
			annotations.Stamp{User: "slack:U1/carol", At: testNow})
	}
	const approved = `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":5,"user":"slack:U1/carol","at":"2026-03-01T12:00:00Z"}]`
	tests := []struct {
		name      string
		ref       decision.ObjectRef
		compute   func(*unstructured.Unstructured) (annotations.Edit, error)
		conflicts int
		want      string
		updates   int
		computes  int
		err       string
	}{
		{name: "applies the edit", ref: webRef, compute: approve, want: approved, updates: 1, computes: 1},
		{name: "recomputes after a conflict", ref: webRef, compute: approve, conflicts: 1, want: approved, updates: 2, computes: 2},
		{name: "gives up when the parent keeps changing", ref: webRef, compute: approve, conflicts: 100, updates: 5, computes: 5, err: "kept changing"},
		{name: "an unchanged edit writes nothing", ref: webRef, computes: 1,
			compute: func(*unstructured.Unstructured) (annotations.Edit, error) {
				return annotations.Edit{Unchanged: true}, nil
			}},
		{name: "an error of compute writes nothing", ref: webRef, computes: 1, err: "no way",
			compute: func(*unstructured.Unstructured) (annotations.Edit, error) {
				return annotations.Edit{}, errors.New("no way")
			}},
		{name: "unknown kind", ref: decision.ObjectRef{APIVersion: "example.com/v1", Kind: "Widget", Name: "w"}, compute: approve, err: "Widget"},
		{name: "missing parent", ref: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "gone"}, compute: approve, err: "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := testParent(5)
			parent.SetAnnotations(map[string]string{"keep": "me"})
			parent.SetResourceVersion("7")
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{deploymentsGVR: "DeploymentList"}, parent)
			conflicts := tt.conflicts
			dyn.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
				if conflicts > 0 {
					conflicts--
					return true, nil, apierrors.NewConflict(deploymentsGVR.GroupResource(), "web", errors.New("changed"))
				}
				return false, nil, nil
			})
			computes := 0
			err := NewDynamicParentEditor(dyn, testMapper()).Edit(context.Background(), tt.ref, func(obj *unstructured.Unstructured) (annotations.Edit, error) {
				computes++
				return tt.compute(obj)
			})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if computes != tt.computes {
				t.Errorf("computed %d times, want %d", computes, tt.computes)
			}
			patches := 0
			for _, a := range dyn.Actions() {
				switch a.GetVerb() {
				case "update":
					t.Errorf("an update; the proxy is granted only patch on parents")
				case "patch":
					patches++
					p := a.(clienttesting.PatchAction)
					if p.GetPatchType() != types.MergePatchType {
						t.Errorf("patch type %s", p.GetPatchType())
					}
					var body struct {
						Metadata map[string]json.RawMessage `json:"metadata"`
					}
					if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
						t.Fatalf("patch %s: %v", p.GetPatch(), err)
					}
					if string(body.Metadata["resourceVersion"]) != `"7"` {
						t.Errorf("patch without the read resourceVersion: %s", p.GetPatch())
					}
					if strings.Contains(string(p.GetPatch()), "keep") || strings.Contains(string(p.GetPatch()), "spec") {
						t.Errorf("the patch names more than the edited annotations: %s", p.GetPatch())
					}
				}
			}
			if patches != tt.updates {
				t.Errorf("%d patches, want %d", patches, tt.updates)
			}
			got, err := dyn.Resource(deploymentsGVR).Namespace("shop").Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ann := got.GetAnnotations()
			if ann["keep"] != "me" || ann[annotations.Approvals] != tt.want {
				t.Errorf("annotations %v, want approvals %s", ann, tt.want)
			}
		})
	}
}
