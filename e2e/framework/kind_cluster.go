package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// checkNoCluster refuses to touch an existing cluster of the same name.
func (k *Kind) checkNoCluster(context.Context) error {
	k.provider = kindcluster.NewProvider(kindcluster.ProviderWithDocker())
	existing, err := k.provider.List()
	if err != nil {
		return fmt.Errorf("listing kind clusters: %w", err)
	}
	for _, name := range existing {
		if name == k.Name {
			return fmt.Errorf("a kind cluster named %s already exists; delete it (kind delete cluster --name %s) or choose another name (KIND_CLUSTER)", k.Name, k.Name)
		}
	}
	return nil
}

func (k *Kind) createCluster(ctx context.Context) error {
	policy := filepath.Join(k.WorkDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(kindAuditPolicy), 0o644); err != nil {
		return err
	}
	proxyPort, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	metricsPort, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	cfg := kindClusterConfig(k.Name, policy, proxyPort, metricsPort)
	createOpts := []kindcluster.CreateOption{
		kindcluster.CreateWithV1Alpha4Config(cfg),
		kindcluster.CreateWithKubeconfigPath(k.KubeconfigPath),
		kindcluster.CreateWithWaitForReady(5 * time.Minute),
		kindcluster.CreateWithDisplayUsage(false),
		kindcluster.CreateWithDisplaySalutation(false),
	}
	if k.opts.NodeImage != "" {
		createOpts = append(createOpts, kindcluster.CreateWithNodeImage(k.opts.NodeImage))
	}
	// From here on Stop deletes the cluster, also after a failed create
	// (kind cleans up after itself too, unless told to retain).
	k.created = true
	if err := k.provider.Create(k.Name, createOpts...); err != nil {
		return err
	}
	nodeList, err := k.provider.ListInternalNodes(k.Name)
	if err != nil {
		return err
	}
	if k.node, err = nodeutils.BootstrapControlPlaneNode(nodeList); err != nil {
		return err
	}
	raw, err := k.provider.KubeConfig(k.Name, false)
	if err != nil {
		return err
	}
	if k.direct, err = clientcmd.RESTConfigFromKubeConfig([]byte(raw)); err != nil {
		return err
	}
	k.direct.QPS, k.direct.Burst = 1000, 2000
	if k.client, err = kubernetes.NewForConfig(k.direct); err != nil {
		return err
	}
	certPEM, err := k.nodeOutput(ctx, "cat", kindClusterCACert)
	if err != nil {
		return err
	}
	keyPEM, err := k.nodeOutput(ctx, "cat", kindClusterCAKey)
	if err != nil {
		return err
	}
	if k.ca, err = parseClusterCA(certPEM, keyPEM); err != nil {
		return err
	}
	k.endpoint.URL = fmt.Sprintf("https://127.0.0.1:%d", proxyPort)
	k.endpoint.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d", metricsPort)
	return nil
}

// freeLoopbackPort picks a port for a kind port mapping. (kind can pick
// one itself, but would not tell which.)
func freeLoopbackPort() (int32, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port), nil
}

// kubectlRun runs ./bin/kubectl against the cluster.
func (k *Kind) kubectlRun(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, k.kubectl, append([]string{"--kubeconfig", k.KubeconfigPath}, args...)...)
	cmd.Dir = k.repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// install applies the overlay, as the README's quick start does, and waits
// for the certificate Job, the proxy, the sink and the aggregated role.
func (k *Kind) install(ctx context.Context) error {
	if _, err := k.kubectlRun(ctx, "apply", "-k", KindOverlay); err != nil {
		return err
	}
	waits := [][]string{
		{"-n", kindNamespace, "wait", "--for=condition=complete", "--timeout=5m", "job/" + kindCertgenJob},
		{"-n", kindNamespace, "rollout", "status", "--timeout=5m", "deployment/" + kindProxyDeployment},
		{"-n", kindNamespace, "rollout", "status", "--timeout=5m", "deployment/" + kindSinkDeployment},
	}
	for _, w := range waits {
		if _, err := k.kubectlRun(ctx, w...); err != nil {
			return err
		}
	}
	// kube-controller-manager (not yet through the proxy) aggregates the
	// e2e role into the proxy's; the Widget scenarios need it.
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		cr, err := k.client.RbacV1().ClusterRoles().Get(ctx, kindAggregatedRole, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, r := range cr.Rules {
			for _, g := range r.APIGroups {
				if g == TestGroup {
					return true, nil
				}
			}
		}
		return false, nil
	})
}

// waitProxy reads the proxy's CA and waits until the test process reaches
// the proxy through the port mapping, metrics port and secure port.
func (k *Kind) waitProxy(ctx context.Context) error {
	secret, err := k.client.CoreV1().Secrets(kindNamespace).Get(ctx, kindProxyTLSSecret, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(secret.Data["ca.crt"]) == 0 {
		return fmt.Errorf("secret %s/%s has no ca.crt", kindNamespace, kindProxyTLSSecret)
	}
	k.endpoint.CAData = secret.Data["ca.crt"]
	admin, err := k.UserThroughProxy("kausality-e2e-admin", "system:masters")
	if err != nil {
		return err
	}
	through, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		code, err := httpGet(ctx, k.endpoint.MetricsURL+"/readyz")
		if err != nil || code != 200 {
			last = fmt.Errorf("%s/readyz: %d %v", k.endpoint.MetricsURL, code, err)
			return false, nil
		}
		if _, err := through.CoreV1().Namespaces().Get(ctx, kindNamespace, metav1.GetOptions{}); err != nil {
			last = fmt.Errorf("a client-certificate user through %s: %w", k.endpoint.URL, err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return nil
}
