package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// cluster is the cluster every shared scenario runs against. TestMain sets
// it: main_local_test.go (the default build, and CI's) to the local
// provider, main_kind_test.go (-tags kind) to the kind provider.
var cluster framework.Cluster

var (
	directOnce sync.Once
	direct     kubernetes.Interface
	directErr  error
)

// directClient is a cluster-admin clientset straight to kube-apiserver.
func directClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	directOnce.Do(func() { direct, directErr = kubernetes.NewForConfig(cluster.Direct()) })
	if directErr != nil {
		t.Fatalf("a client for the cluster: %v", directErr)
	}
	return direct
}

// newNamespace creates a namespace directly (not through the proxy) and
// deletes it when the test ends.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	name := prefix + "-" + rand.String(5)
	admin := clientFor(t, cluster.Direct())
	if _, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// kubectl runs the kubectl built by `make testbin` with a kubeconfig for cfg.
type kubectl struct {
	t          *testing.T
	bin        string
	kubeconfig string
}

func newKubectl(t *testing.T, cfg *rest.Config) *kubectl {
	t.Helper()
	dir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubectl missing: %v; run `make testbin`", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return &kubectl{t: t, bin: bin, kubeconfig: path}
}

func (k *kubectl) cmd(ctx context.Context, stdin string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	if stdin != "" {
		c.Stdin = strings.NewReader(stdin)
	}
	return c
}

// run runs kubectl and fails the test when it fails.
func (k *kubectl) run(stdin string, args ...string) string {
	k.t.Helper()
	out, err := k.try(stdin, args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// try runs kubectl and returns its combined output and error.
func (k *kubectl) try(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var buf bytes.Buffer
	c := k.cmd(ctx, stdin, args...)
	c.Stdout, c.Stderr = &buf, &buf
	err := c.Run()
	return buf.String(), err
}

// rawClient is an HTTP/1.1 client to the proxy. HTTP/1.1 because tests send
// hop-by-hop headers (Connection) that HTTP/2 forbids.
func rawClient(t *testing.T, clientCert *tls.Certificate) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cluster.ProxyEndpoint().CAData) {
		t.Fatal("cannot parse the proxy CA")
	}
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		tlsCfg.Certificates = []tls.Certificate{*clientCert}
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: tlsCfg,
			TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func certOf(t *testing.T, cfg *rest.Config) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		t.Fatalf("client cert of %s: %v", cfg.Username, err)
	}
	return &c
}

// editBinding grants a service account the built-in edit role in ns.
func editBinding(ns, sa string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-edit", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}},
	}
}

// Shared with the other suites that run against a real control plane.
var (
	eventually = testutil.Eventually
	clientFor  = testutil.ClientFor
	mustf      = testutil.Mustf
)
