package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// The operator-sdk's memcached sample, the pattern most operators are
// copied from: its resource reports only an Available condition (Unknown
// on the first reconcile, True once its Deployment has the size the spec
// asks for) and no observed generation anywhere. Here the Widget plays the
// Memcached (spec.size) and the scripted controller plays the operator,
// writing a real Deployment through the proxy.

// setAvailable is the operator's status write: only the Available
// condition.
func (f *wgFamily) setAvailable(status string) {
	f.t.Helper()
	f.writeStatus("Available="+status, map[string]any{"conditions": []any{map[string]any{
		"type": "Available", "status": status, "reason": "Reconciling",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}})
}

// widgetSize is the size the Widget's spec asks for.
func (f *wgFamily) widgetSize() int32 {
	n, _, _ := unstructured.NestedInt64(f.getWidget().Object, "spec", "size")
	return int32(n)
}

// memcachedDeployment is the operator's Deployment of size replicas.
func (f *wgFamily) memcachedDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": f.widget}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: f.widget, Namespace: f.ns, OwnerReferences: []metav1.OwnerReference{f.ownerRef()}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "memcached", Image: "registry.invalid/memcached:1.6"}}},
			},
		},
	}
}

// reconcileSize is the operator setting its Deployment's replicas to the
// size its resource asks for (a read-modify-update, as the sample does).
func (f *wgFamily) reconcileSize(replicas int32, dryRun bool) error {
	ctx := context.Background()
	// kube-controller-manager writes the Deployment too: a conflict is
	// retried on the fresh object, as the operator's next reconcile would.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := f.ctrl.kube.AppsV1().Deployments(f.ns).Get(ctx, f.widget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To(replicas)
		opts := metav1.UpdateOptions{FieldManager: wgManager}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = f.ctrl.kube.AppsV1().Deployments(f.ns).Update(ctx, d, opts)
		return err
	})
}

func (f *wgFamily) settleReconcile(replicas int32, want string) {
	f.t.Helper()
	f.settle(want, func() error { return f.reconcileSize(replicas, true) })
}

// TestOperatorReportingOnlyAvailable: the memcached pattern is initialized,
// carries out its spec changes with no denial, and a person's edit of its
// Deployment is held against the operator's revert.
func TestOperatorReportingOnlyAvailable(t *testing.T) {
	f := newWGFamily(t, "memcached", "enforce")
	ctx := context.Background()
	size := f.widgetSize
	replicas := func() int32 {
		d, err := directClient(t).AppsV1().Deployments(f.ns).Get(ctx, f.widget, metav1.GetOptions{})
		mustf(t, err, "reading the Deployment")
		return *d.Spec.Replicas
	}

	// The first reconcile: Available Unknown, then the Deployment, then
	// Available True once it matches.
	f.setAvailable("Unknown")
	_, err := f.ctrl.kube.AppsV1().Deployments(f.ns).Create(ctx, f.memcachedDeployment(size()), metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the operator creates its Deployment")
	f.setAvailable("True")
	eventually(t, 30*time.Second, "the Widget is initialized", func() error {
		if got := f.getWidget().GetAnnotations()[wgAnnPhase]; got != "initialized" {
			return fmt.Errorf("%s = %q", wgAnnPhase, got)
		}
		return nil
	})
	f.settleReconcile(size()+1, "Deny/DriftUnapproved")

	// A spec change: the operator has not written status since, so it is
	// carrying the change out.
	for i := 0; i < 2; i++ {
		f.bumpSpec()
		f.settleReconcile(size(), "Allow/Expected")
		mustf(t, f.reconcileSize(size(), false), "the operator scales its Deployment to the new size %d", size())
		f.setAvailable("True")
		f.settleReconcile(size()+1, "Deny/DriftUnapproved")
	}

	// A person scales the Deployment; the operator's revert is drift.
	want := size()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := f.alice.kube.AppsV1().Deployments(f.ns).Get(ctx, f.widget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To(want + 2)
		_, err = f.alice.kube.AppsV1().Deployments(f.ns).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	mustf(t, err, "a person scales the operator's Deployment")
	err = f.reconcileSize(want, false)
	if got := wgCategory(err, nil); got != "Deny/DriftUnapproved" {
		t.Fatalf("the operator's revert: %s, want Deny/DriftUnapproved", got)
	}
	if got := replicas(); got != want+2 {
		t.Fatalf("the Deployment has %d replicas after the revert was denied, want the person's %d", got, want+2)
	}
}
