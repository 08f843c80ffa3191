package framework

// The kind provider. StartKind, step by step:
//
//  1. CheckDocker: the docker CLI must exist and `docker info` must reach a
//     daemon; otherwise it fails at once, saying which (never a skip).
//  2. Refuses to reuse an existing kind cluster of the same name.
//  3. Builds kausality-proxy:e2e from the repository's Dockerfile (as
//     `make docker-build` does) and the DriftReport sink
//     kausality-e2e-reportsink:e2e (e2e/reportsink, a static binary in a
//     FROM-scratch image).
//  4. Creates the cluster with the kind library: one control-plane node,
//     the proxy's NodePorts (30443, 30090) mapped to free ports on
//     127.0.0.1, kube-apiserver's audit log, a kubelet that syncs pods every
//     5s (kindClusterConfig). The kubeconfig goes to the work dir, never to
//     ~/.kube/config.
//  5. Loads both images into the nodes: `docker save`, then
//     nodeutils.LoadImageArchive (what `kind load docker-image` does).
//  6. `kubectl apply -k manifests/overlays/kind-e2e`, then waits for the
//     certgen Job, the proxy and sink Deployments and for
//     kube-controller-manager (still direct) to aggregate the e2e
//     ClusterRole into the proxy's.
//  7. Reads the proxy's CA from its TLS Secret and waits until the test
//     process reaches the proxy (metrics /readyz, and a client-certificate
//     user signed with the cluster CA through the secure port).
//  8. Repoints kube-controller-manager: rewrites
//     /etc/kubernetes/controller-manager.conf on the control-plane node
//     (server = the Service's ClusterIP, CA = the proxy's CA,
//     tls-server-name = the Service's DNS name), restarts the static pod
//     (manifest out until the container is gone, back with an annotation
//     that gives it a new UID) and waits until the deployment controller's
//     writes show up in the proxy's decision log (a probe Deployment).
//
// Not yet run anywhere (the machine this was written on has no Docker
// engine); verify these first when `make e2e-kind` runs for the first time:
// kubeadm accepting the audit extraArgs/extraVolumes and kubelet patches on
// 1.35 (the audit policy mount needs a daemon that sees the host's temp
// dir); the BuildKit build and the FROM-scratch sink image; the containerd
// import; PodSecurity, certgen and the kube-root-ca.crt mount in a real
// cluster; the NodePort mappings; the host-network kube-controller-manager
// reaching the ClusterIP with tls-server-name; the static-pod restart and
// leader-election delay; whether the least-privilege RBAC covers all of
// kube-controller-manager's traffic; SetConfig latency through the kubelet's
// ConfigMap sync; delivery to the sink; scenario timeouts tuned for local.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/kausality-io/kausality-proxy/intercept/notify"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

// What the kind provider and manifests/overlays/kind-e2e agree on. The
// framework's unit tests render the overlay and check it against these.
const (
	// KindOverlay is the kustomization the provider applies, relative to
	// the repository root.
	KindOverlay = "manifests/overlays/kind-e2e"
	// KindProxyImage is the proxy image the provider builds from the
	// Dockerfile and loads into the nodes.
	KindProxyImage = "kausality-proxy:e2e"
	// KindReportSinkImage is the DriftReport sink's image (e2e/reportsink).
	KindReportSinkImage = "kausality-e2e-reportsink:e2e"
	// KindDefaultClusterName is the kind cluster's name unless
	// KindOptions.ClusterName says otherwise.
	KindDefaultClusterName = "kausality-e2e"

	kindNamespace         = "kausality-system"
	kindProxyService      = "kausality-proxy"
	kindProxyServiceDNS   = kindProxyService + "." + kindNamespace + ".svc"
	kindProxyDeployment   = "kausality-proxy"
	kindProxySelector     = "app.kubernetes.io/name=kausality-proxy,app.kubernetes.io/component=proxy"
	kindProxyContainer    = "kausality-proxy"
	kindProxyConfigMap    = "kausality-proxy-config"
	kindProxyConfigKey    = "config.yaml"
	kindProxyTLSSecret    = "kausality-proxy-tls"
	kindCertgenJob        = "kausality-proxy-certgen"
	kindSinkDeployment    = "kausality-e2e-reportsink"
	kindSinkSelector      = "app.kubernetes.io/name=kausality-e2e-reportsink"
	kindSinkURL           = "http://kausality-e2e-reportsink.kausality-system.svc:8080/"
	kindE2EClusterRole    = "kausality-proxy-e2e-kausality-io"
	kindAggregatedRole    = "kausality-proxy-extensions"
	kindProxyNodePort     = 30443
	kindMetricsNodePort   = 30090
	kindClientCAMountFile = "/var/run/kausality-proxy/client-ca/ca.crt"

	// The control-plane node's layout (kubeadm, as kind sets it up).
	kindKCMKubeconfig   = "/etc/kubernetes/controller-manager.conf"
	kindKCMManifest     = "/etc/kubernetes/manifests/kube-controller-manager.yaml"
	kindKCMManifestAway = "/etc/kubernetes/kube-controller-manager.yaml.kausality-e2e"
	kindKCMContainer    = "kube-controller-manager"
	kindClusterCACert   = "/etc/kubernetes/pki/ca.crt"
	kindClusterCAKey    = "/etc/kubernetes/pki/ca.key"
	kindAuditPolicyPath = "/etc/kubernetes/policies/kausality-e2e-audit-policy.yaml"
	kindAuditLogPath    = "/var/log/kubernetes/kube-apiserver-audit.log"
)

// KindOptions configure the kind provider.
type KindOptions struct {
	// ClusterName is the kind cluster to create (KindDefaultClusterName if
	// empty). A cluster of that name must not exist yet.
	ClusterName string
	// NodeImage is the kindest/node image; empty means the default of the
	// kind library in go.mod (Kubernetes 1.35 for kind v0.31).
	NodeImage string
	// Keep leaves the cluster (and its kubeconfig) in place after Stop, for
	// debugging. StartKind prints how to reach and delete it.
	Keep bool
	// RepoRoot is the repository (Dockerfile, manifests/); empty means
	// testenv.RepoRoot().
	RepoRoot string
	// Log receives progress lines; nil means os.Stderr.
	Log io.Writer
}

// Kind is the kind provider: a kind cluster (one control-plane node) with
// kausality-proxy installed from manifests/overlays/kind-e2e and the
// cluster's own kube-controller-manager repointed at it.
type Kind struct {
	// Name is the kind cluster's name.
	Name string
	// KubeconfigPath is a cluster-admin kubeconfig for the cluster.
	KubeconfigPath string
	// WorkDir holds the kubeconfig, the audit policy and image archives.
	WorkDir string

	opts     KindOptions
	repo     string
	kubectl  string
	log      io.Writer
	provider *kindcluster.Provider
	created  bool
	node     nodes.Node

	direct   *rest.Config
	client   kubernetes.Interface
	endpoint Endpoint
	ca       *clusterCA

	auditMu     sync.Mutex
	auditOffset int64
	auditLines  lineSplitter
	audit       []auditv1.Event

	configMu sync.Mutex
}

var _ Cluster = (*Kind)(nil)

// CheckDocker says plainly why the kind provider cannot run here: no docker
// CLI, or no Docker daemon behind it.
func CheckDocker(ctx context.Context) error {
	path, err := exec.LookPath("docker")
	if err != nil {
		return errors.New("docker is not available: the docker CLI is not installed (not found in $PATH); the kind provider needs Docker; nothing was run")
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	if err != nil {
		host := os.Getenv("DOCKER_HOST")
		if host == "" {
			host = "unix:///var/run/docker.sock"
		}
		return fmt.Errorf("docker is not available: 'docker info' cannot reach a daemon at %s (%v: %s); the kind provider needs Docker; nothing was run",
			host, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// StartKind creates the kind cluster, builds and loads the images, installs
// the proxy and repoints kube-controller-manager at it. Without Docker it
// returns CheckDocker's error and does nothing else. On any other failure
// it deletes what it created (unless KindOptions.Keep).
func StartKind(ctx context.Context, opts KindOptions) (_ *Kind, retErr error) {
	if err := CheckDocker(ctx); err != nil {
		return nil, err
	}
	if opts.ClusterName == "" {
		opts.ClusterName = KindDefaultClusterName
	}
	k := &Kind{Name: opts.ClusterName, opts: opts, log: opts.Log}
	if k.log == nil {
		k.log = os.Stderr
	}
	var err error
	if k.repo = opts.RepoRoot; k.repo == "" {
		if k.repo, err = testenv.RepoRoot(); err != nil {
			return nil, err
		}
	}
	binDir, err := testenv.BinDir()
	if err != nil {
		return nil, err
	}
	if err := testenv.CheckBinaries(binDir, testenv.BinKubectl); err != nil {
		return nil, err
	}
	k.kubectl = filepath.Join(binDir, testenv.BinKubectl)
	if k.WorkDir, err = os.MkdirTemp("", "kausality-kind-"); err != nil {
		return nil, err
	}
	k.KubeconfigPath = filepath.Join(k.WorkDir, "kubeconfig")
	defer func() {
		if retErr != nil {
			k.Stop()
		}
	}()

	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"checking that no kind cluster " + k.Name + " exists", k.checkNoCluster},
		{"building the images", k.buildImages},
		{"creating the kind cluster " + k.Name, k.createCluster},
		{"loading the images into the nodes", k.loadImages},
		{"installing " + KindOverlay, k.install},
		{"waiting for the proxy", k.waitProxy},
		{"repointing kube-controller-manager at the proxy", k.repointControllerManager},
	}
	for _, s := range steps {
		k.logf("%s", s.what)
		start := time.Now()
		if err := s.do(ctx); err != nil {
			return nil, fmt.Errorf("kind provider: %s: %w", s.what, err)
		}
		k.logf("%s: done in %s", s.what, time.Since(start).Round(time.Second))
	}
	return k, nil
}

func (k *Kind) logf(format string, args ...any) {
	fmt.Fprintf(k.log, "kind-e2e: "+format+"\n", args...)
}

// Stop deletes the cluster (unless KindOptions.Keep) and the work dir.
func (k *Kind) Stop() {
	if k.opts.Keep {
		if k.created {
			k.logf("keeping the kind cluster %s: kubectl --kubeconfig %s ...; delete it with: kind delete cluster --name %s", k.Name, k.KubeconfigPath, k.Name)
		}
		return
	}
	if k.created && k.provider != nil {
		if err := k.provider.Delete(k.Name, k.KubeconfigPath); err != nil {
			k.logf("deleting the kind cluster %s: %v", k.Name, err)
		}
	}
	if k.WorkDir != "" {
		_ = os.RemoveAll(k.WorkDir)
	}
}

// ---- setup steps ----

// dockerArch is the daemon's architecture in GOARCH spelling.
func dockerArch(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Arch}}").Output()
	if err != nil {
		return "", fmt.Errorf("docker version: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// run runs a host command, streaming its output to the provider's log.
func (k *Kind) run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = k.log, k.log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// buildImages builds the proxy image from the repository's Dockerfile (as
// `make docker-build` does) and the DriftReport sink's image from a static
// binary built on this machine.
func (k *Kind) buildImages(ctx context.Context) error {
	if err := k.run(ctx, k.repo, []string{"DOCKER_BUILDKIT=1"}, "docker", "build", "-t", KindProxyImage, "."); err != nil {
		return err
	}
	arch, err := dockerArch(ctx)
	if err != nil {
		return err
	}
	sinkDir := filepath.Join(k.WorkDir, "reportsink")
	if err := os.MkdirAll(sinkDir, 0o755); err != nil {
		return err
	}
	if err := k.run(ctx, k.repo, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch},
		"go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(sinkDir, "reportsink"), "./e2e/reportsink"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(sinkDir, "Dockerfile"), []byte(reportSinkDockerfile), 0o644); err != nil {
		return err
	}
	return k.run(ctx, sinkDir, []string{"DOCKER_BUILDKIT=1"}, "docker", "build", "-t", KindReportSinkImage, ".")
}

// reportSinkDockerfile needs no base image to pull.
const reportSinkDockerfile = `FROM scratch
COPY reportsink /reportsink
USER 65532:65532
ENTRYPOINT ["/reportsink"]
`

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

// loadImages does what `kind load docker-image` does: docker save, then
// import the archive into containerd on every node.
func (k *Kind) loadImages(ctx context.Context) error {
	nodeList, err := k.provider.ListInternalNodes(k.Name)
	if err != nil {
		return err
	}
	for _, image := range []string{KindProxyImage, KindReportSinkImage} {
		archive := filepath.Join(k.WorkDir, strings.NewReplacer(":", "_", "/", "_").Replace(image)+".tar")
		if err := k.run(ctx, "", nil, "docker", "save", "-o", archive, image); err != nil {
			return err
		}
		for _, n := range nodeList {
			f, err := os.Open(archive)
			if err != nil {
				return err
			}
			err = nodeutils.LoadImageArchive(n, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("loading %s into %s: %w", image, n, err)
			}
		}
		_ = os.Remove(archive)
	}
	return nil
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

// ---- Cluster ----

// Direct implements Cluster.
func (k *Kind) Direct() *rest.Config { return rest.CopyConfig(k.direct) }

// UserThroughProxy implements Cluster: a client certificate signed with the
// cluster CA's key (read from the control-plane node), which the proxy
// trusts through the kube-root-ca.crt ConfigMap.
func (k *Kind) UserThroughProxy(name string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := k.ca.signClientCert(name, groups, time.Now())
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: k.endpoint.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   append([]byte(nil), k.endpoint.CAData...),
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		QPS:   1000,
		Burst: 2000,
	}, nil
}

// ServiceAccountThroughProxy implements Cluster.
func (k *Kind) ServiceAccountThroughProxy(ctx context.Context, namespace, name string) (*rest.Config, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := k.client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	tr, err := k.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{
		Host:            k.endpoint.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), k.endpoint.CAData...)},
		BearerToken:     tr.Status.Token,
	}, nil
}

// ProxyEndpoint implements Cluster: the NodePorts, mapped to 127.0.0.1.
func (k *Kind) ProxyEndpoint() Endpoint {
	e := k.endpoint
	e.CAData = append([]byte(nil), e.CAData...)
	return e
}

// podLogs returns the logs of the pods matching selector in namespace,
// oldest pod first; of a restarted container, the previous run's log comes
// first.
func (k *Kind) podLogs(ctx context.Context, namespace, selector, container string) ([]byte, error) {
	pods, err := k.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, fmt.Errorf("no pod %s in %s", selector, namespace)
	}
	items := pods.Items
	sort.SliceStable(items, func(i, j int) bool {
		if !items[i].CreationTimestamp.Equal(&items[j].CreationTimestamp) {
			return items[i].CreationTimestamp.Before(&items[j].CreationTimestamp)
		}
		return items[i].Name < items[j].Name
	})
	var out []byte
	for _, p := range items {
		restarted := false
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == container && cs.RestartCount > 0 {
				restarted = true
			}
		}
		if restarted {
			prev, err := k.client.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: true}).DoRaw(ctx)
			if err == nil {
				out = appendLines(out, prev)
			}
		}
		cur, err := k.client.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("logs of %s/%s: %w", namespace, p.Name, err)
		}
		out = appendLines(out, cur)
	}
	return out, nil
}

// appendLines appends b to out, making sure a line of out is not joined
// with the first line of b.
func appendLines(out, b []byte) []byte {
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, b...)
}

// ProxyLog implements Cluster: the pod log of the proxy (one replica).
func (k *Kind) ProxyLog() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return k.podLogs(ctx, kindNamespace, kindProxySelector, kindProxyContainer)
}

// Decisions implements Cluster.
func (k *Kind) Decisions() ([]DecisionLine, error) {
	data, err := k.ProxyLog()
	if err != nil {
		return nil, err
	}
	return ParseDecisions(bytes.NewReader(data))
}

// DriftReports implements Cluster: the reports the sink logged.
func (k *Kind) DriftReports(namespace, child string) ([]notify.DriftReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	data, err := k.podLogs(ctx, kindNamespace, kindSinkSelector, "reportsink")
	if err != nil {
		return nil, err
	}
	return parseDriftReports(data, namespace, child), nil
}

// SetConfig implements Cluster: it updates the proxy's config ConfigMap and
// waits until the proxy logs that it reloaded the file. The kubelet updates
// the mounted file on its next sync of the pod (the cluster's kubelet syncs
// every few seconds; see kindClusterConfig), and the proxy polls it every
// second.
func (k *Kind) SetConfig(ctx context.Context, content string) error {
	k.configMu.Lock()
	defer k.configMu.Unlock()
	cms := k.client.CoreV1().ConfigMaps(kindNamespace)
	cm, err := cms.Get(ctx, kindProxyConfigMap, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cm.Data[kindProxyConfigKey] == content {
		// Loaded already: every change waits for its reload.
		return nil
	}
	log, err := k.ProxyLog()
	if err != nil {
		return err
	}
	before := scanConfigEvents(log)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, kindProxyConfigMap, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[kindProxyConfigKey] = content
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	var refused string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, false, func(context.Context) (bool, error) {
		log, err := k.ProxyLog()
		if err != nil {
			return false, nil
		}
		now := scanConfigEvents(log)
		if len(now.Refused) > len(before.Refused) {
			refused = now.Refused[len(now.Refused)-1]
			return true, nil
		}
		return now.Reloads > before.Reloads, nil
	})
	if refused != "" {
		return fmt.Errorf("the proxy refused the new config: %s", refused)
	}
	if err != nil {
		return fmt.Errorf("the proxy did not load the new config (the kubelet updates the mounted ConfigMap on its pod sync): %w", err)
	}
	return nil
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

// AuditEvents implements Cluster: kube-apiserver's audit log on the
// control-plane node (kindAuditPolicy), read incrementally.
func (k *Kind) AuditEvents() ([]auditv1.Event, error) {
	k.auditMu.Lock()
	defer k.auditMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data, err := k.nodeOutput(ctx, "tail", "-c", fmt.Sprintf("+%d", k.auditOffset+1), kindAuditLogPath)
	if err != nil {
		return nil, err
	}
	k.auditOffset += int64(len(data))
	k.audit = appendAuditEvents(k.audit, k.auditLines.feed(data))
	return k.audit[:len(k.audit):len(k.audit)], nil
}

// ---- helpers ----

var errNoContext = errors.New("the kubeconfig has no current context")

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// clusterCA signs client certificates like the cluster's own CA.
type clusterCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}
