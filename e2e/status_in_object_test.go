package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// plainGVR is a namespaced parent kind whose CRD declares no status
// subresource: its operator reports status through writes of the object.
var plainGVR = schema.GroupVersionResource{Group: framework.TestGroup, Version: framework.TestVersion, Resource: "plainwidgets"}

func plainWidgetCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plainGVR.Resource + "." + plainGVR.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: plainGVR.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "plainwidgets", Singular: "plainwidget", Kind: "PlainWidget", ListKind: "PlainWidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: plainGVR.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": preserve, "status": preserve},
				}},
			}},
		},
	}
}

// An operator whose parent kind has no status subresource reports its
// observed generation through writes of the parent itself. The proxy
// records it as the parent's controller from them, as from a status
// write: its later drift on a child is held whatever field manager it
// names, not taken for a new origin because it named another than the one
// that owns status.observedGeneration.
func TestAParentWithoutAStatusSubresourceRecordsItsController(t *testing.T) {
	wgSetup(t)
	ctx := context.Background()
	mustf(t, framework.InstallCRDs(ctx, cluster.Direct(), plainWidgetCRD()), "the PlainWidget CRD")
	ns := wgNamespace(t, "plainstatus", "enforce")
	ctrl := wgController(t)
	admin, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "admin dynamic client")
	name := "pw"
	parent := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": wgAPIVersion, "kind": "PlainWidget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"size": int64(1)},
	}}
	created, err := admin.Resource(plainGVR).Namespace(ns).Create(ctx, parent, metav1.CreateOptions{})
	mustf(t, err, "creating PlainWidget %s", name)

	// The operator reports the generation observed, through the object.
	// Without a status subresource a status change is a change of the
	// object, and kube-apiserver bumps its generation for it: the
	// operator reports the generation its write makes.
	observed := created.GetGeneration() + 1
	created.Object["status"] = map[string]any{
		"observedGeneration": observed,
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled",
			"observedGeneration": observed, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
	}
	// The proxy learns of the new kind from discovery, which it reads
	// again at most so often: until then the write gets a 404, as for a
	// kind nobody serves, and a controller retries it.
	eventually(t, 30*time.Second, "the operator reports status through PlainWidget "+name, func() error {
		_, err := ctrl.dyn.Resource(plainGVR).Namespace(ns).Update(ctx, created, metav1.UpdateOptions{FieldManager: wgManager})
		return err
	})
	eventually(t, 30*time.Second, "the operator recorded as the PlainWidget's controller", func() error {
		got, err := admin.Resource(plainGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.GetAnnotations()["kausality.io/controllers"] == "" {
			return fmt.Errorf("annotations %v", got.GetAnnotations())
		}
		return nil
	})

	// Its new child under the settled parent, under another field manager.
	child := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wgAPIVersion, "kind": "Gadget",
			"metadata": map[string]any{"name": "g", "namespace": ns, "ownerReferences": []any{map[string]any{
				"apiVersion": wgAPIVersion, "kind": "PlainWidget", "name": name, "uid": string(created.GetUID()),
				"controller": true, "blockOwnerDeletion": true,
			}}},
			"spec": map[string]any{"value": "drift"},
		}}
	}
	var last error
	eventually(t, 30*time.Second, "the operator's drift under another field manager held", func() error {
		_, last = ctrl.dyn.Resource(framework.GadgetGVR).Namespace(ns).Create(ctx, child(),
			metav1.CreateOptions{FieldManager: "kubectl-edit", DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(last) {
			return fmt.Errorf("dry run: %v, want 403", last)
		}
		return nil
	})
	_, err = ctrl.dyn.Resource(framework.GadgetGVR).Namespace(ns).Create(ctx, child(), metav1.CreateOptions{FieldManager: "kubectl-edit"})
	var status apierrors.APIStatus
	if !apierrors.IsForbidden(err) || !errors.As(err, &status) {
		t.Fatalf("the operator's drift under fieldManager kubectl-edit: %v, want 403", err)
	}
	if _, err := admin.Resource(framework.GadgetGVR).Namespace(ns).Get(ctx, "g", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the held drift was stored: %v", err)
	}
}
