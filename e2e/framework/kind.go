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
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"

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

var errNoContext = errors.New("the kubeconfig has no current context")

// clusterCA signs client certificates like the cluster's own CA.
type clusterCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}
