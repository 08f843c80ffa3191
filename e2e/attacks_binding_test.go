//go:build !kind

package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
)

// kube-apiserver copies a Binding's annotations onto the pod it binds.
// Whoever may bind pods (the scheduler) must not write a pod's kausality
// annotations through it; a Binding without them goes through, and its
// other annotations land on the pod as kube-apiserver puts them there.
func TestAttackBindingCannotWriteKausalityAnnotations(t *testing.T) {
	ctx := context.Background()
	admin := directClient(t)
	ns := newNamespace(t, "binding")
	user := "scheduler-" + utilrand.String(5)
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "binder"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/binding", "bindings"}, Verbs: []string{"create"}},
		},
	}, metav1.CreateOptions{})
	mustf(t, err, "role")
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "binder"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "binder"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	mustf(t, err, "role binding")
	cfg, err := cluster.UserThroughProxy(user)
	mustf(t, err, "user %s", user)
	binder := clientFor(t, cfg)
	waitAllowed(t, user, "get", "pods", ns)

	// No scheduler runs here: the pod stays unbound until bound below.
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:1"}}},
	}, metav1.CreateOptions{})
	mustf(t, err, "pod")
	binding := func(annotations map[string]string) *corev1.Binding {
		return &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Annotations: annotations},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
		}
	}

	err = binder.CoreV1().Pods(ns).Bind(ctx, binding(map[string]string{"kausality.io/mode": "log"}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a Binding carrying kausality.io/mode through the proxy: %v, want 403", err)
	}
	got, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	mustf(t, err, "pod")
	if got.Spec.NodeName != "" || got.Annotations["kausality.io/mode"] != "" {
		t.Fatalf("the refused Binding reached kube-apiserver: node %q, annotations %v", got.Spec.NodeName, got.Annotations)
	}

	err = binder.CoreV1().Pods(ns).Bind(ctx, binding(map[string]string{"scheduler.example.com/score": "7"}), metav1.CreateOptions{})
	mustf(t, err, "a Binding without kausality annotations")
	got, err = admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	mustf(t, err, "pod")
	if got.Spec.NodeName != "node-1" {
		t.Fatalf("the Binding did not bind the pod: node %q", got.Spec.NodeName)
	}
	// The premise: kube-apiserver copies a Binding's annotations.
	if got.Annotations["scheduler.example.com/score"] != "7" {
		t.Fatalf("kube-apiserver no longer copies a Binding's annotations onto the pod (%v): the refusal may go", got.Annotations)
	}
}
