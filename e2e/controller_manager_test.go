package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func testDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
			},
		},
	}
}

// kube-controller-manager runs through the proxy with one service-account
// token per controller. A Deployment must become a ReplicaSet and Pods.
func TestControllerManagerReconcilesThroughProxy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "kcm")
	admin := clientFor(t, cluster.Direct())

	_, err := admin.AppsV1().Deployments(ns).Create(ctx, testDeployment("web", 2), metav1.CreateOptions{})
	mustf(t, err, "creating deployment")

	eventually(t, 90*time.Second, "deployment controller creates a ReplicaSet", func() error {
		rss, err := admin.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(rss.Items) != 1 {
			return fmt.Errorf("%d replicasets", len(rss.Items))
		}
		return nil
	})
	eventually(t, 90*time.Second, "replicaset controller creates two Pods", func() error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) != 2 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		return nil
	})
	eventually(t, 90*time.Second, "deployment status is observed", func() error {
		d, err := admin.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ObservedGeneration != d.Generation || d.Status.Replicas != 2 {
			return fmt.Errorf("observedGeneration %d/%d, replicas %d", d.Status.ObservedGeneration, d.Generation, d.Status.Replicas)
		}
		return nil
	})

	// The controllers went through the proxy under their own service
	// accounts: the audit log names them on the ReplicaSet and Pod creates.
	events, err := cluster.AuditEvents()
	mustf(t, err, "reading audit log")
	seen := map[string]bool{}
	for _, e := range events {
		if e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Namespace == ns && e.ResponseStatus != nil && e.ResponseStatus.Code == 201 {
			seen[e.ObjectRef.Resource+" by "+e.User.Username] = true
		}
	}
	for _, want := range []string{
		"replicasets by system:serviceaccount:kube-system:deployment-controller",
		"pods by system:serviceaccount:kube-system:replicaset-controller",
	} {
		if !seen[want] {
			t.Errorf("audit log has no successful create of %s in %s; saw %v", want, ns, seen)
		}
	}

	// Nothing the controller manager logged points at the proxy breaking
	// authentication or authorization.
	log, err := cluster.ControllerManagerLog()
	mustf(t, err, "reading kube-controller-manager log")
	// (The proxy's own identity is the user kausality-proxy locally and its
	// service account on kind.)
	authProblem := regexp.MustCompile(`(?i)(unauthorized|x509:|certificate signed by unknown authority|impersonat|is forbidden: User "(system:serviceaccount:kausality-system:)?kausality-proxy")`)
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "FLAG: --") {
			continue // the flag dump at start-up names flags like --authorization-webhook-cache-unauthorized-ttl
		}
		if authProblem.MatchString(line) {
			t.Errorf("kube-controller-manager logged an auth problem: %s", line)
		}
	}
}
