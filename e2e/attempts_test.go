package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// cert-manager's shape, with its group and kinds: a Certificate reports its
// observed generation only in its conditions, and on renewal its request
// manager creates a new CertificateRequest with a controller reference to
// the Certificate, under a Certificate that has long settled.
var (
	certificateGVR        = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	certificateRequestGVR = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificaterequests"}
)

func certManagerCRDs() []*apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	return []*apiextensionsv1.CustomResourceDefinition{
		framework.TestKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate", Plural: "certificates", Scope: apiextensionsv1.NamespaceScoped,
			Spec: map[string]apiextensionsv1.JSONSchemaProps{"secretName": str, "commonName": str}, Status: true}.CRD(),
		framework.TestKind{Group: "cert-manager.io", Version: "v1", Kind: "CertificateRequest", Plural: "certificaterequests", Scope: apiextensionsv1.NamespaceScoped,
			Spec: map[string]apiextensionsv1.JSONSchemaProps{"request": str}}.CRD(),
	}
}

// TestRenewalsOfShippedAttemptKindsPass: with the default configuration
// in enforce mode, a controller creating a new CertificateRequest on a
// timer under its settled Certificate (a renewal) passes every time; the
// same controller creating a child of a kind that is not an attempt under
// the same settled parent is held.
func TestRenewalsOfShippedAttemptKindsPass(t *testing.T) {
	wgSetup(t)
	ctx := context.Background()
	mustf(t, framework.InstallCRDs(ctx, cluster.Direct(), certManagerCRDs()...), "installing cert-manager's kinds")
	ctrl, alice := wgController(t), wgAlice(t)
	admin, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "admin dynamic client")
	ns := wgNamespace(t, "renewals", "enforce")

	cert := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "web-tls"},
		"spec":     map[string]any{"secretName": "web-tls", "commonName": "web.example.com"},
	}}
	created, err := alice.dyn.Resource(certificateGVR).Namespace(ns).Create(ctx, cert, metav1.CreateOptions{})
	mustf(t, err, "a person creates the Certificate")
	owner := metav1.OwnerReference{APIVersion: "cert-manager.io/v1", Kind: "Certificate", Name: "web-tls", UID: created.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}

	// The issuing controller's status: Ready with the observed generation
	// in the condition only, as cert-manager writes it.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := ctrl.dyn.Resource(certificateGVR).Namespace(ns).Get(ctx, "web-tls", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Object["status"] = map[string]any{"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "Ready", "observedGeneration": c.GetGeneration(),
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}}
		_, err = ctrl.dyn.Resource(certificateGVR).Namespace(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: wgManager})
		return err
	})
	mustf(t, err, "the controller reports the Certificate Ready")
	eventually(t, 30*time.Second, "the Certificate is initialized", func() error {
		c, err := admin.Resource(certificateGVR).Namespace(ns).Get(ctx, "web-tls", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := c.GetAnnotations()[wgAnnPhase]; got != "initialized" {
			return fmt.Errorf("%s = %q", wgAnnPhase, got)
		}
		return nil
	})

	request := func(gvr schema.GroupVersionResource, kind string, dryRun bool) error {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvr.GroupVersion().String(), "kind": kind,
			"metadata": map[string]any{"generateName": "web-tls-"},
			"spec":     map[string]any{},
		}}
		obj.SetOwnerReferences([]metav1.OwnerReference{owner})
		opts := metav1.CreateOptions{FieldManager: wgManager}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := ctrl.dyn.Resource(gvr).Namespace(ns).Create(ctx, obj, opts)
		return err
	}
	// Once the proxy's view of the Certificate has caught up, a child of a
	// gated kind is drift: the Certificate is settled.
	eventually(t, 30*time.Second, "a gated child under the settled Certificate is held", func() error {
		ctrl.warnings.take()
		err := request(framework.GadgetGVR, "Gadget", true)
		if got := wgCategory(err, ctrl.warnings.take()); got != "Deny/DriftUnapproved" {
			return fmt.Errorf("got %s", got)
		}
		return nil
	})
	for i := 1; i <= 3; i++ {
		ctrl.warnings.take()
		err := request(certificateRequestGVR, "CertificateRequest", false)
		mustf(t, err, "renewal %d: the controller creates a CertificateRequest under the settled Certificate", i)
	}
	list, err := admin.Resource(certificateRequestGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	mustf(t, err, "listing CertificateRequests")
	if len(list.Items) != 3 {
		t.Fatalf("%d CertificateRequests after three renewals, want 3", len(list.Items))
	}
	err = request(framework.GadgetGVR, "Gadget", false)
	if got := wgCategory(err, nil); got != "Deny/DriftUnapproved" {
		t.Fatalf("the controller's create of a Gadget under the settled Certificate: %s, want Deny/DriftUnapproved", got)
	}
}
