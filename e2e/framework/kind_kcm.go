package framework

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// repointControllerManager points the kind cluster's kube-controller-manager
// at the proxy's Service: its kubeconfig (a host-network static pod reaches
// the ClusterIP through kube-proxy's rules on the node, but cannot resolve
// the Service's DNS name, hence tls-server-name) and a restart of the
// static pod. It waits until the deployment controller's writes arrive
// through the proxy.
func (k *Kind) repointControllerManager(ctx context.Context) error {
	svc, err := k.client.CoreV1().Services(kindNamespace).Get(ctx, kindProxyService, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return fmt.Errorf("service %s/%s has no ClusterIP", kindNamespace, kindProxyService)
	}
	server := "https://" + net.JoinHostPort(svc.Spec.ClusterIP, "443")
	old, err := k.nodeOutput(ctx, "cat", kindKCMKubeconfig)
	if err != nil {
		return err
	}
	repointed, err := repointKubeconfig(old, server, k.endpoint.CAData, kindProxyServiceDNS)
	if err != nil {
		return fmt.Errorf("rewriting %s: %w", kindKCMKubeconfig, err)
	}
	if err := nodeutils.WriteFile(k.node, kindKCMKubeconfig, string(repointed)); err != nil {
		return err
	}
	if err := k.restartControllerManager(ctx); err != nil {
		return err
	}

	// Proof: a Deployment's ReplicaSet is created by the deployment
	// controller through the proxy (a decision line names it).
	const probeNS = "kausality-e2e-probe"
	if _, err := k.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probeNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	defer func() {
		_ = k.client.CoreV1().Namespaces().Delete(context.Background(), probeNS, metav1.DeleteOptions{})
	}()
	labels := map[string]string{"app": "probe"}
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: probeNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/probe:1"}}},
			},
		},
	}
	if _, err := k.client.AppsV1().Deployments(probeNS).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		return err
	}
	const deploymentController = "system:serviceaccount:kube-system:deployment-controller"
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
		lines, err := k.Decisions()
		if err != nil {
			return false, nil
		}
		for _, d := range lines {
			if d.Str("namespace") == probeNS && d.Str("resource") == "replicasets" && d.Str("user") == deploymentController {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		tail, _ := k.ControllerManagerLog()
		return fmt.Errorf("the deployment controller's writes do not arrive through the proxy: %w\n--- kube-controller-manager log (tail):\n%s", err, lastLines(tail, 40))
	}
	return nil
}

// restartControllerManager restarts the static pod: its manifest moves out
// of the kubelet's manifest dir until the container is gone, then comes
// back with an annotation that changes the static pod's UID (derived from
// the manifest), so the kubelet starts a new pod rather than finding the
// UID it just terminated.
func (k *Kind) restartControllerManager(ctx context.Context) error {
	before, err := k.kcmContainerID(ctx)
	if err != nil {
		return err
	}
	manifest, err := k.nodeOutput(ctx, "cat", kindKCMManifest)
	if err != nil {
		return err
	}
	annotated, err := annotateStaticPod(manifest, "kausality.io/e2e-repointed-at", time.Now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return fmt.Errorf("%s: %w", kindKCMManifest, err)
	}
	// Written outside the manifest dir, so the kubelet never sees half a file.
	if err := nodeutils.WriteFile(k.node, kindKCMManifestAway, string(annotated)); err != nil {
		return err
	}
	if _, err := k.nodeOutput(ctx, "rm", kindKCMManifest); err != nil {
		return err
	}
	stopErr := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		id, err := k.kcmContainerID(ctx)
		return err == nil && id == "", nil
	})
	// Put it back whatever happened (a rename in one filesystem).
	if _, err := k.nodeOutput(ctx, "mv", kindKCMManifestAway, kindKCMManifest); err != nil {
		return err
	}
	if stopErr != nil {
		return fmt.Errorf("the kubelet did not stop kube-controller-manager: %w", stopErr)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		id, err := k.kcmContainerID(ctx)
		return err == nil && id != "" && id != before, nil
	})
	if err != nil {
		return fmt.Errorf("the kubelet did not start kube-controller-manager again: %w", err)
	}
	return nil
}

// kcmContainerID is the running kube-controller-manager container on the
// control-plane node, "" if there is none.
func (k *Kind) kcmContainerID(ctx context.Context) (string, error) {
	out, err := k.nodeOutput(ctx, "crictl", "ps", "--state", "Running", "--name", "^"+kindKCMContainer+"$", "-q")
	if err != nil {
		return "", err
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return "", nil
	}
	return fields[0], nil
}

// nodeOutput runs a command on the control-plane node and returns its
// stdout; a failure carries its stderr.
func (k *Kind) nodeOutput(ctx context.Context, name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	err := k.node.CommandContext(ctx, name, args...).SetStdout(&stdout).SetStderr(&stderr).Run()
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s on node %s: %v: %s", name, strings.Join(args, " "), k.node, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// ControllerManagerLog implements Cluster: the log of the static pod's
// current container (started when it was repointed at the proxy).
func (k *Kind) ControllerManagerLog() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pod := kindKCMContainer + "-" + k.node.String()
	data, err := k.client.CoreV1().Pods("kube-system").GetLogs(pod, &corev1.PodLogOptions{Container: kindKCMContainer}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of kube-system/%s: %w", pod, err)
	}
	return string(data), nil
}
