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

// kube-apiserver's namespaces/finalize keeps the metadata of the body it
// is given, annotations included. Whoever may only finalize namespaces
// (kube-controller-manager's namespace controller) must not lower a
// namespace's kausality.io/mode through it; a finalize that leaves the
// annotations alone goes through.
func TestAttackNamespaceFinalizeCannotLowerTheMode(t *testing.T) {
	ctx := context.Background()
	admin := directClient(t)
	user := "finalizer-" + utilrand.String(5)
	role := "kausality-e2e-" + user
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces/finalize"}, Verbs: []string{"update"}},
		},
	}, metav1.CreateOptions{})
	mustf(t, err, "cluster role")
	t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(ctx, role, metav1.DeleteOptions{}) })
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	mustf(t, err, "cluster role binding")
	t.Cleanup(func() { _ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, role, metav1.DeleteOptions{}) })
	cfg, err := cluster.UserThroughProxy(user)
	mustf(t, err, "user %s", user)
	finalizer := clientFor(t, cfg)
	waitAllowed(t, user, "get", "namespaces", "")

	enforced := func() *corev1.Namespace {
		ns := newNamespace(t, "finalize")
		got, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		mustf(t, err, "namespace %s", ns)
		got.Annotations = map[string]string{"kausality.io/mode": "enforce"}
		got, err = admin.CoreV1().Namespaces().Update(ctx, got, metav1.UpdateOptions{})
		mustf(t, err, "annotating namespace %s", ns)
		return got
	}
	lowered := func(ns *corev1.Namespace) *corev1.Namespace {
		ns = ns.DeepCopy()
		ns.Annotations["kausality.io/mode"] = "log"
		return ns
	}

	// The premise: kube-apiserver stores a finalize's annotations.
	direct := enforced()
	stored, err := admin.CoreV1().Namespaces().Finalize(ctx, lowered(direct), metav1.UpdateOptions{})
	mustf(t, err, "finalizing %s directly", direct.Name)
	if got := stored.Annotations["kausality.io/mode"]; got != "log" {
		t.Fatalf("kube-apiserver's finalize no longer keeps annotations (mode %q): the guard may go", got)
	}

	through := enforced()
	_, err = finalizer.CoreV1().Namespaces().Finalize(ctx, lowered(through), metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a finalize lowering kausality.io/mode through the proxy: %v, want 403", err)
	}
	got, err := admin.CoreV1().Namespaces().Get(ctx, through.Name, metav1.GetOptions{})
	mustf(t, err, "namespace %s", through.Name)
	if mode := got.Annotations["kausality.io/mode"]; mode != "enforce" {
		t.Fatalf("the finalize lowered the namespace's mode to %q", mode)
	}
	// A finalize of what is stored goes through.
	_, err = finalizer.CoreV1().Namespaces().Finalize(ctx, got, metav1.UpdateOptions{})
	mustf(t, err, "a finalize that leaves the annotations alone")
}
