//go:build !kind

package e2e

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// TestAllowancesLetAControllerRebuildItsChildSpec: a controller that
// rebuilds its child's spec from scratch (existing.Spec = desired; Update,
// as many operators do) sends a PUT that leaves out every field
// kube-apiserver defaults: restartPolicy, dnsPolicy, schedulerName,
// terminationMessagePath... kube-apiserver stores them unchanged. In an
// allowance-enforce namespace, the write is no violation of those fields:
// the proxy asks kube-apiserver what the write stores before it refuses a
// write whose every violation is a field it leaves out.
func TestAllowancesLetAControllerRebuildItsChildSpec(t *testing.T) {
	ctx := context.Background()
	applyShippedAllowancePolicies(t)

	ns := allowanceNamespace(t, "allow-rebuild", "enforce")
	pause := allowanceReadyPods(t, ns)
	alice := intentPerson(t, "alice")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)
	pause(true)
	scaleDeploymentTo(t, alice, ns, rsName, 4)

	ctrl := intentServiceAccount(t, "deployment-controller")
	var stored *appsv1.ReplicaSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rs, err := ctrl.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := rs.Spec.Template.Spec.Containers[0]
		rs.Spec = appsv1.ReplicaSetSpec{
			Replicas: rs.Spec.Replicas,
			Selector: rs.Spec.Selector,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: rs.Spec.Template.ObjectMeta,
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: c.Name, Image: c.Image}}},
			},
		}
		stored, err = ctrl.AppsV1().ReplicaSets(ns).Update(ctx, rs, metav1.UpdateOptions{})
		return err
	})
	mustf(t, err, "the deployment controller's identity writes the ReplicaSet's spec rebuilt from scratch")
	if got := stored.Spec.Template.Spec.RestartPolicy; got != corev1.RestartPolicyAlways {
		t.Errorf("the stored template's restartPolicy is %q: kube-apiserver did not default it back, the premise fails", got)
	}
}
