package e2e

import (
	"context"
	"errors"
	"reflect"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// statusOf is the Status of a refused request, or nil for none.
func statusOf(err error) *metav1.Status {
	var api apierrors.APIStatus
	if !errors.As(err, &api) {
		return nil
	}
	s := api.Status()
	return &s
}

// sameRefusal fails t unless the proxy's answer to a write is kube-apiserver's
// own answer to the same write sent directly: both refused with the same
// Status (code, reason, message, details), or both accepted.
func sameRefusal(t *testing.T, what string, direct, proxied error) {
	t.Helper()
	d, p := statusOf(direct), statusOf(proxied)
	switch {
	case direct == nil && proxied == nil:
	case d == nil || p == nil:
		t.Fatalf("%s: directly %v, through the proxy %v", what, direct, proxied)
	case d.Code != p.Code || d.Reason != p.Reason || d.Message != p.Message || !reflect.DeepEqual(d.Details, p.Details):
		t.Fatalf("%s: through the proxy %d %s %q %+v, directly %d %s %q %+v", what, p.Code, p.Reason, p.Message, p.Details, d.Code, d.Reason, d.Message, d.Details)
	}
}

// kube-apiserver refuses an update that names no resourceVersion of a
// custom resource, and of the built-in kinds whose strategy says so
// (PodDisruptionBudgets, Leases): a client that read nothing must not
// overwrite what others wrote. The proxy pins the writes it decides to the
// version it read, which would make such an update land. Here the
// controller's update of its Gadget is Expected (the Widget's spec just
// changed), so the proxy would allow it: it must still be refused exactly
// as kube-apiserver refuses it, for the object and for its status, and
// leave the object as it was. A ConfigMap, whose kind allows such an
// update, is updated through the proxy as directly.
func TestAnUpdateWithoutResourceVersionIsRefusedAsKubeAPIServerRefusesIt(t *testing.T) {
	f := newInitializedGadgetFamily(t, "uncond", "enforce")
	f.bumpSpec()
	ctx := context.Background()
	gadgets, direct := f.gadgets(f.ctrl), f.admin.Resource(framework.GadgetGVR).Namespace(f.ns)
	stored, err := direct.Get(ctx, "g", metav1.GetOptions{})
	mustf(t, err, "get Gadget g")
	// What a controller that read nothing sends: the object it wants,
	// without resourceVersion, and without the annotations the proxy
	// keeps (which it puts back from the version it read).
	unversioned := func() *unstructured.Unstructured {
		u := stored.DeepCopy()
		u.SetResourceVersion("")
		u.SetAnnotations(nil)
		mustf(t, unstructured.SetNestedField(u.Object, "carried-out", "spec", "value"), "set value")
		return u
	}
	opts := metav1.UpdateOptions{FieldManager: wgManager}
	_, directErr := direct.Update(ctx, unversioned(), opts)
	_, proxiedErr := gadgets.Update(ctx, unversioned(), opts)
	if !apierrors.IsInvalid(directErr) {
		t.Fatalf("kube-apiserver answered an update of a Gadget without resourceVersion with %v, want Invalid", directErr)
	}
	sameRefusal(t, "the controller's update of Gadget g without resourceVersion", directErr, proxiedErr)
	after, err := direct.Get(ctx, "g", metav1.GetOptions{})
	mustf(t, err, "get Gadget g")
	if after.GetResourceVersion() != stored.GetResourceVersion() {
		t.Fatalf("Gadget g changed from resourceVersion %s to %s", stored.GetResourceVersion(), after.GetResourceVersion())
	}
	// The Widget's status, written by its controller (Gadgets have no
	// status subresource: kube-apiserver's 404, through the proxy too).
	widget := f.getWidget()
	widget.SetResourceVersion("")
	widget.SetAnnotations(nil)
	widget.Object["status"] = map[string]any{"observedGeneration": widget.GetGeneration()}
	_, directErr = f.admin.Resource(framework.WidgetGVR).UpdateStatus(ctx, widget, opts)
	_, proxiedErr = f.ctrl.dyn.Resource(framework.WidgetGVR).UpdateStatus(ctx, widget, opts)
	if !apierrors.IsInvalid(directErr) {
		t.Fatalf("kube-apiserver answered a status update of a Widget without resourceVersion with %v, want Invalid", directErr)
	}
	sameRefusal(t, "the controller's status update of its Widget without resourceVersion", directErr, proxiedErr)
	_, directErr = direct.UpdateStatus(ctx, unversioned(), opts)
	_, proxiedErr = gadgets.UpdateStatus(ctx, unversioned(), opts)
	if !apierrors.IsNotFound(directErr) {
		t.Fatalf("kube-apiserver answered a status update of a Gadget (no status subresource) with %v, want NotFound", directErr)
	}
	sameRefusal(t, "the controller's status update of Gadget g, which has no status subresource", directErr, proxiedErr)
	// With the resourceVersion it read, the controller's update lands.
	versioned := unversioned()
	versioned.SetResourceVersion(stored.GetResourceVersion())
	_, err = gadgets.Update(ctx, versioned, opts)
	mustf(t, err, "the controller's update of Gadget g naming its resourceVersion")

	admin, err := kubernetes.NewForConfig(cluster.Direct())
	mustf(t, err, "admin client")
	ctrl := f.ctrl.kube
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "budget", Namespace: f.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
	_, err = admin.PolicyV1().PodDisruptionBudgets(f.ns).Create(ctx, pdb, metav1.CreateOptions{})
	mustf(t, err, "create PodDisruptionBudget")
	pdb.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	_, directErr = admin.PolicyV1().PodDisruptionBudgets(f.ns).Update(ctx, pdb, metav1.UpdateOptions{})
	_, proxiedErr = ctrl.PolicyV1().PodDisruptionBudgets(f.ns).Update(ctx, pdb, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(directErr) {
		t.Fatalf("kube-apiserver answered an update of a PodDisruptionBudget without resourceVersion with %v, want Invalid", directErr)
	}
	sameRefusal(t, "an update of a PodDisruptionBudget without resourceVersion", directErr, proxiedErr)

	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lease", Namespace: f.ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("one")}}
	_, err = admin.CoordinationV1().Leases(f.ns).Create(ctx, lease, metav1.CreateOptions{})
	mustf(t, err, "create Lease")
	lease.Spec.HolderIdentity = ptr.To("two")
	_, directErr = admin.CoordinationV1().Leases(f.ns).Update(ctx, lease, metav1.UpdateOptions{})
	_, proxiedErr = ctrl.CoordinationV1().Leases(f.ns).Update(ctx, lease, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(directErr) {
		t.Fatalf("kube-apiserver answered an update of a Lease without resourceVersion with %v, want Invalid", directErr)
	}
	sameRefusal(t, "an update of a Lease without resourceVersion", directErr, proxiedErr)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: f.ns}, Data: map[string]string{"a": "1"}}
	_, err = admin.CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{})
	mustf(t, err, "create ConfigMap")
	cm.Data["a"] = "2"
	_, err = ctrl.CoreV1().ConfigMaps(f.ns).Update(ctx, cm, metav1.UpdateOptions{})
	mustf(t, err, "an update of a ConfigMap without resourceVersion through the proxy (kube-apiserver allows it)")
}

// The built-in resources the proxy knows to refuse an update without
// resourceVersion, and whether each has a status subresource, as the
// control plane the tests run against serves them: a resource with a
// status subresource the table does not know of would have its status
// updates pinned and landing; one the table wrongly gives one would have
// them refused as Invalid where kube-apiserver says NotFound.
func TestTheResourcesThatRefuseUnconditionalUpdatesAreServedAsKnown(t *testing.T) {
	disco, err := discovery.NewDiscoveryClientForConfig(cluster.Direct())
	mustf(t, err, "discovery client")
	_, lists, err := disco.ServerGroupsAndResources()
	mustf(t, err, "discovery")
	served := map[schema.GroupResource]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		mustf(t, err, "group version %s", l.GroupVersion)
		for _, r := range l.APIResources {
			served[schema.GroupResource{Group: gv.Group, Resource: r.Name}] = true
		}
	}
	checked := 0
	for _, gr := range []schema.GroupResource{
		{Group: "policy", Resource: "poddisruptionbudgets"},
		{Group: "coordination.k8s.io", Resource: "leases"},
		{Group: "storage.k8s.io", Resource: "csidrivers"},
		{Group: "storage.k8s.io", Resource: "csinodes"},
		{Group: "storage.k8s.io", Resource: "csistoragecapacities"},
		{Group: "storage.k8s.io", Resource: "volumeattachments"},
		{Group: "node.k8s.io", Resource: "runtimeclasses"},
		{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"},
		{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"},
		{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"},
		{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"},
		{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"},
		{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicybindings"},
		{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
		{Group: "apiregistration.k8s.io", Resource: "apiservices"},
		{Group: "certificates.k8s.io", Resource: "clustertrustbundles"},
		{Group: "certificates.k8s.io", Resource: "podcertificaterequests"},
		{Group: "coordination.k8s.io", Resource: "leasecandidates"},
		{Group: "internal.apiserver.k8s.io", Resource: "storageversions"},
		{Group: "storagemigration.k8s.io", Resource: "storageversionmigrations"},
	} {
		refuses, status := decision.RefusesUnconditionalUpdate(gr)
		if !refuses {
			t.Errorf("%s: not known to refuse unconditional updates", gr)
		}
		if !served[gr] {
			// Alpha and beta APIs this control plane does not enable.
			continue
		}
		checked++
		statusGR := schema.GroupResource{Group: gr.Group, Resource: gr.Resource + "/status"}
		if served[statusGR] != status {
			t.Errorf("%s: status subresource served %v, known %v", gr, served[statusGR], status)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d of the resources are served by the control plane; want the generally available ones at least", checked)
	}
}
