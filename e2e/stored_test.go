package e2e

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// The verdict is about the object kube-apiserver stores, not the proxy's
// computation of it. A controller rewriting a child with what kube-apiserver
// already stores, in a form the proxy does not normalize itself, is no
// drift: no denial, no warning, no report.
func TestStoredNoFalseDrift(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "stored", "enforce")
	f.initialize()
	// The children are created while the Widget carries out a spec
	// change (expected), then the Widget settles: from then on every
	// controller write that changes a child is drift.
	f.bumpSpec()
	ctrl := f.ctrl.kube
	owner := []metav1.OwnerReference{f.ownerRef()}
	password := "pw-" + utilrand.String(10)

	_, err := ctrl.CoreV1().Secrets(f.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", OwnerReferences: owner},
		StringData: map[string]string{"password": password},
	}, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the controller creates the Secret")
	_, err = ctrl.CoreV1().Services(f.ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", OwnerReferences: owner},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the controller creates the Service")
	_, err = ctrl.CoreV1().LimitRanges(f.ns).Create(ctx, &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: "mem", OwnerReferences: owner},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type: corev1.LimitTypeContainer, Default: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}}},
	}, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the controller creates the LimitRange")
	f.setStatus(true)

	writes := []struct {
		name, resource, child string
		write                 func() error
	}{
		{"a Secret rewritten with the same stringData (kube-apiserver folds it into data)", "secrets", "creds", func() error {
			_, err := ctrl.CoreV1().Secrets(f.ns).Patch(ctx, "creds", types.MergePatchType,
				[]byte(`{"stringData":{"password":"`+password+`"}}`), metav1.PatchOptions{FieldManager: wgManager})
			return err
		}},
		{"a Service patched without its defaulted fields (protocol, targetPort)", "services", "web", func() error {
			_, err := ctrl.CoreV1().Services(f.ns).Patch(ctx, "web", types.MergePatchType,
				[]byte(`{"spec":{"ports":[{"port":80}]}}`), metav1.PatchOptions{FieldManager: wgManager})
			return err
		}},
		{"a quantity sent as 1024Mi where 1Gi is stored", "limitranges", "mem", func() error {
			_, err := ctrl.CoreV1().LimitRanges(f.ns).Patch(ctx, "mem", types.MergePatchType,
				[]byte(`{"spec":{"limits":[{"type":"Container","default":{"memory":"1024Mi"}}]}}`), metav1.PatchOptions{FieldManager: wgManager})
			return err
		}},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			mark := wgMark(t)
			f.ctrl.warnings.take()
			mustf(t, w.write(), "the controller's rewrite")
			if ws := f.ctrl.warnings.take(); len(ws) > 0 {
				t.Errorf("warnings for a write that changes nothing kube-apiserver stores: %q", ws)
			}
			d := wgDecision(t, mark, w.resource, f.ns, w.child)
			wgExpectDecision(t, d, "Allow", "NoDesiredChange")
			if d.Bool("drift") {
				t.Errorf("decided as drift: %v", d)
			}
		})
	}
	// No report was sent for any of them, and none ever carries the
	// Secret's value.
	time.Sleep(time.Second)
	for _, child := range []string{"creds", "web", "mem"} {
		reports, err := cluster.DriftReports(f.ns, child)
		mustf(t, err, "reports")
		if len(reports) > 0 {
			t.Errorf("DriftReports for %s: %+v", child, reports)
		}
	}
	logData, err := cluster.ProxyLog()
	mustf(t, err, "proxy log")
	if strings.Contains(string(logData), password) || strings.Contains(string(logData), base64.StdEncoding.EncodeToString([]byte(password))) {
		t.Error("the proxy log carries the Secret's value")
	}
}

// An ownerReference keeps the version it was written with. A child whose
// controller reference names apps/v1beta2, which kube-apiserver no longer
// serves, is decided under its parent like any other.
func TestStoredParentAtAnUnservedVersion(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "unserved", "enforce")
	alice := intentPerson(t, "alice")
	dep, _ := intentSettledDeployment(t, alice, ns, "web", 0, false)
	mark := wgMark(t)
	_, err := alice.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1beta2", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: ptr.To(true),
		}}},
		Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	mustf(t, err, "a child owned at apps/v1beta2 is decided, not refused")
	d := wgDecision(t, mark, "configmaps", ns, "legacy")
	wgExpectDecision(t, d, "Allow", "NewOrigin")
	if got := d.Str("parent"); !strings.Contains(got, "Deployment "+ns+"/web") {
		t.Errorf("parent %q, want the Deployment", got)
	}
}

// A status write is never gated, so a parent the proxy cannot read never
// fails it; a spec write under the same parent follows the failure policy.
func TestStoredStatusWriteUnderAnUnreadableParent(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "unreadable", "enforce")
	admin := directClient(t)
	dep := testDeployment("orphan", 0)
	dep.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "ghosts.example.com/v1", Kind: "Ghost", Name: "g", UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true),
	}}
	created, err := admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	mustf(t, err, "creating a Deployment owned by an unserved kind")
	alice := intentPerson(t, "alice")

	// kube-controller-manager's deployment controller writes the status
	// too: retry on its conflicts from fresh state.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := alice.AppsV1().Deployments(ns).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		current.Status.ObservedGeneration = current.Generation
		_, err = alice.AppsV1().Deployments(ns).UpdateStatus(ctx, current, metav1.UpdateOptions{})
		return err
	})
	mustf(t, err, "a status write under an unreadable parent succeeds")

	_, err = alice.AppsV1().Deployments(ns).Patch(ctx, "orphan", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{})
	s := wgStatus(t, err, 500, "a spec write under an unreadable parent (--failure-policy=Fail)")
	if !strings.Contains(s.Message, "Ghost") {
		t.Errorf("the refusal does not name the parent: %q", s.Message)
	}
}

// Moving a child away from its parent is a write under that parent: taking
// the controller ownerReference off a frozen Widget's Gadget, together with
// a spec change, is refused, and the Gadget keeps its owner and its spec.
func TestStoredOwnerReferenceRemovalUnderAFrozenParent(t *testing.T) {
	f := newWGFamily(t, "unown", "enforce")
	f.initialize()
	f.bumpSpec()
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates its Gadget (expected)")
	f.setStatus(true)
	frozen := "true"
	f.annotateWidget(map[string]*string{wgAnnFreeze: &frozen})

	mark := wgMark(t)
	_, err = f.writeGadget(f.alice, "g", false, func(g *unstructured.Unstructured) {
		refs := g.GetOwnerReferences()
		for i := range refs {
			refs[i].Controller = nil
		}
		g.SetOwnerReferences(refs)
		_ = unstructured.SetNestedField(g.Object, "b", "spec", "value")
	})
	wgStatus(t, err, 403, "removing the controller reference of a frozen parent's child with a spec change")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "Frozen")
	if v := f.gadgetValue("g"); v != "a" {
		t.Fatalf("the Gadget changed: spec.value %q", v)
	}
}
