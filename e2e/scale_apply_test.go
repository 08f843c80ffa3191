package e2e

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A server-side apply to /scale is answered as kube-apiserver answers it:
// without force, a conflict with the manager that owns the replicas; with
// force, the replicas taken over. The proxy computes what the apply makes
// of the stored Scale to decide on it, so a forced apply it computed
// without force would be refused by the proxy alone.
func TestServerSideApplyToScaleHonoursForce(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "scale-apply", "enforce")
	_, err := f.ctrl.kube.AppsV1().Deployments(f.ns).Create(ctx, f.memcachedDeployment(1), metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the controller creates its Deployment, owning spec.replicas")
	f.initialize()
	scale := []byte(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"` + f.widget + `","namespace":"` + f.ns + `"},"spec":{"replicas":4}}`)
	apply := func(force bool) error {
		opts := metav1.PatchOptions{FieldManager: "alice-autoscaler"}
		if force {
			opts.Force = ptr.To(true)
		}
		_, err := f.alice.kube.AppsV1().Deployments(f.ns).Patch(ctx, f.widget, types.ApplyPatchType, scale, opts, "scale")
		return err
	}

	if err := apply(false); !apierrors.IsConflict(err) {
		t.Fatalf("an apply of replicas owned by %s without force: %v, want kube-apiserver's 409 conflict", wgManager, err)
	}
	mustf(t, apply(true), "a forced apply to /scale takes the replicas, as it does at kube-apiserver")
	d, err := directClient(t).AppsV1().Deployments(f.ns).Get(ctx, f.widget, metav1.GetOptions{})
	mustf(t, err, "reading the Deployment")
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 4 {
		t.Errorf("spec.replicas %d after the forced apply, want 4", got)
	}
}
