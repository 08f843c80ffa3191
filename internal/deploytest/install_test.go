package deploytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/internal/testenv"
	"github.com/kausality-io/kausality-proxy/proxy"
)

// installation is the default install (`kubectl apply -k manifests/`)
// applied for real to the shared control plane, its init step run, and the
// proxy running in-process as the manifests' Deployment would run it: with
// the Deployment's args, the service account kausality-system/
// kausality-proxy (bound to exactly the manifests' RBAC, nothing else), the
// Secret the certgen Job created and the --config from the manifests'
// ConfigMap. kube-controller-manager runs through it.
//
// What differs from a pod, and why:
//   - the proxy runs in-process (listeners on 127.0.0.1:0 instead of
//     :8443/:9090, files in a temp dir instead of volume mounts, a bearer
//     token file instead of in-cluster config);
//   - --client-ca-file is set to the control plane's client CA, because
//     kube-controller-manager (and one test user) authenticate with client
//     certificates here; that exercises the impersonation rules;
//   - the certgen command gets --extra-sans=127.0.0.1 so that
//     kube-controller-manager, which the harness points at the proxy's
//     loopback address, can verify the certificate.
type installation struct {
	dir        string
	rendered   []*unstructured.Unstructured
	applyOut   string
	certgenLog []string

	secret       *corev1.Secret
	kubeconfigCM *corev1.ConfigMap
	caPEM        []byte
	caFile       string

	proxyURL   string
	metricsURL string
	logPath    string
	server     *proxy.Server
	stopProxy  context.CancelFunc
	proxyDone  chan error
	kcm        *testenv.ControllerManager
}

var (
	installOnce sync.Once
	inst        *installation
	instErr     error
)

// installed returns the installation, setting it up on first use.
func installed(t *testing.T) *installation {
	t.Helper()
	installOnce.Do(func() {
		// If setUp fails it ends the test with t.Fatal (runtime.Goexit) and
		// this error stays for the tests that come later.
		instErr = errors.New("installing the manifests failed in an earlier test (see its output)")
		inst = &installation{}
		inst.setUp(t)
		instErr = nil
	})
	if instErr != nil {
		t.Fatal(instErr)
	}
	return inst
}

// stopInstall tears the installation down (TestMain).
func stopInstall() {
	if inst == nil {
		return
	}
	if inst.kcm != nil {
		_ = inst.kcm.Stop()
	}
	if inst.stopProxy != nil {
		inst.stopProxy()
		select {
		case <-inst.proxyDone:
		case <-time.After(30 * time.Second):
		}
	}
	if inst.dir != "" && !failedKeep() {
		_ = os.RemoveAll(inst.dir)
	}
}

func failedKeep() bool { return os.Getenv(testenv.EnvKeep) != "" }

func (in *installation) setUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	in.dir, err = os.MkdirTemp("", "kausality-deploytest-")
	mustf(t, err, "temp dir")
	admin := clientFor(t, cp.AdminConfig)

	// 1. kubectl apply -k manifests/, for real, as cluster-admin.
	adminKubeconfig := filepath.Join(in.dir, "admin.kubeconfig")
	mustf(t, testenv.WriteKubeconfig(adminKubeconfig, cp.AdminConfig), "admin kubeconfig")
	k := kubectlWithKubeconfig(t, adminKubeconfig)
	in.applyOut = k.run("", "apply", "-k", "manifests")
	_, in.rendered = render(t, "manifests")

	// 2. The init step: the certgen Job's command, with the Job's args,
	// as the Job's service account.
	var job batchv1.Job
	convert(t, find(t, in.rendered, "Job", "kausality-proxy-certgen"), &job)
	args := append([]string(nil), job.Spec.Template.Spec.Containers[0].Args...)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$(POD_NAMESPACE)", installNamespace)
	}
	certgenKubeconfig := in.serviceAccountKubeconfig(t, ctx, certgenSA)
	args = append(args, "--kubeconfig="+certgenKubeconfig, "--extra-sans=127.0.0.1")
	for i := 0; i < 2; i++ { // the second run must be a no-op
		cmd := exec.CommandContext(ctx, proxyBinary(t), args...)
		out, err := cmd.CombinedOutput()
		mustf(t, err, "kausality-proxy %s (as %s):\n%s", strings.Join(args, " "), certgenSA, out)
		in.certgenLog = append(in.certgenLog, string(out))
	}
	if !strings.Contains(in.certgenLog[0], "created a self-signed CA") || !strings.Contains(in.certgenLog[1], "kept") ||
		!strings.Contains(in.certgenLog[1], "ca.crt is current") {
		t.Fatalf("certgen: the first run must create, the second keep:\n%s\n---\n%s", in.certgenLog[0], in.certgenLog[1])
	}

	// Applying the manifests again changes nothing, and keeps the CA the
	// init step published (it is not part of the manifest). kubectl always
	// sends the PDB's selector (patchStrategy "replace") and so reports it
	// "configured"; its generation shows that nothing changed.
	pdb, err := admin.PolicyV1().PodDisruptionBudgets(installNamespace).Get(ctx, "kausality-proxy", metav1.GetOptions{})
	mustf(t, err, "pdb")
	again := k.run("", "apply", "-k", "manifests")
	for _, line := range strings.Split(strings.TrimSpace(again), "\n") {
		if !strings.HasSuffix(line, " unchanged") && line != "poddisruptionbudget.policy/kausality-proxy configured" {
			t.Fatalf("applying the manifests a second time changed something: %q\n%s", line, again)
		}
	}
	pdb2, err := admin.PolicyV1().PodDisruptionBudgets(installNamespace).Get(ctx, "kausality-proxy", metav1.GetOptions{})
	mustf(t, err, "pdb")
	if pdb2.Generation != pdb.Generation {
		t.Fatalf("applying the manifests a second time changed the PDB's spec")
	}
	in.secret, err = admin.CoreV1().Secrets(installNamespace).Get(ctx, tlsSecret, metav1.GetOptions{})
	mustf(t, err, "the serving certificate Secret")
	in.kubeconfigCM, err = admin.CoreV1().ConfigMaps(installNamespace).Get(ctx, kubeconfigCMName, metav1.GetOptions{})
	mustf(t, err, "the kubeconfig ConfigMap")
	in.caPEM = in.secret.Data["ca.crt"]
	in.caFile = writeFile(t, filepath.Join(in.dir, "ca.crt"), in.caPEM)

	// 3. The proxy, configured by the Deployment's args, as the service
	// account the Deployment runs as.
	in.startProxy(t, ctx)

	// 4. kube-controller-manager through the proxy. Among its controllers
	// is the clusterrole-aggregation controller that fills the aggregated
	// kausality-proxy-extensions role.
	in.kcm, err = cp.StartControllerManager(ctx, in.proxyURL, in.caPEM)
	mustf(t, err, "kube-controller-manager through the proxy")
	eventually(t, 90*time.Second, "kube-controller-manager aggregates kausality-proxy-extensions", func() error {
		cr, err := admin.RbacV1().ClusterRoles().Get(ctx, "kausality-proxy-extensions", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(cr.Rules) == 0 {
			return fmt.Errorf("no rules yet")
		}
		return nil
	})
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// manifests' service account name, straight to kube-apiserver.
func (in *installation) serviceAccountKubeconfig(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	cfg, err := cp.ServiceAccountConfig(ctx, installNamespace, name)
	mustf(t, err, "token for %s", name)
	path := filepath.Join(in.dir, name+".kubeconfig")
	mustf(t, testenv.WriteKubeconfig(path, cfg), "kubeconfig for %s", name)
	return path
}

func (in *installation) startProxy(t *testing.T, ctx context.Context) {
	var d struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	raw, err := find(t, in.rendered, "Deployment", "kausality-proxy").MarshalJSON()
	mustf(t, err, "deployment")
	mustf(t, json.Unmarshal(raw, &d), "deployment")
	opts := parseProxyArgs(t, d.Spec.Template.Spec.Containers[0].Args)

	// Files the pod would get from its volumes.
	tlsDir := filepath.Join(in.dir, "tls")
	opts.SecureServing.ServerCert.CertKey.CertFile = writeFile(t, filepath.Join(tlsDir, "tls.crt"), in.secret.Data["tls.crt"])
	opts.SecureServing.ServerCert.CertKey.KeyFile = writeFile(t, filepath.Join(tlsDir, "tls.key"), in.secret.Data["tls.key"])
	var cfgCM corev1.ConfigMap
	convert(t, find(t, in.rendered, "ConfigMap", configCMName), &cfgCM)
	opts.ConfigFile = writeFile(t, filepath.Join(in.dir, "config", filepath.Base(opts.ConfigFile)), []byte(cfgCM.Data[filepath.Base(opts.ConfigFile)]))

	// The service account's token, as in-cluster config would read it.
	token, err := cp.ServiceAccountToken(ctx, installNamespace, proxySA)
	mustf(t, err, "token for %s", proxySA)
	opts.UpstreamConfig = &rest.Config{
		// envtest's Host ends in "/"; the proxy's upstream /readyz probe
		// would then ask for "//readyz" and never become ready (reported;
		// in-cluster config has no trailing slash).
		Host:            strings.TrimSuffix(cp.Host, "/"),
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAData},
		BearerTokenFile: writeFile(t, filepath.Join(in.dir, "sa", "token"), []byte(token)),
	}
	opts.ClientCAFile = cp.ClientCAFile
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	opts.SecureServing.Listener, err = net.Listen("tcp", "127.0.0.1:0")
	mustf(t, err, "listener")
	opts.MetricsListener, err = net.Listen("tcp", "127.0.0.1:0")
	mustf(t, err, "metrics listener")
	opts.ShutdownTimeout = 5 * time.Second
	opts.UpstreamProbeInterval = 500 * time.Millisecond

	in.logPath = filepath.Join(in.dir, "kausality-proxy.log")
	f, err := os.Create(in.logPath)
	mustf(t, err, "proxy log")
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(f), zapcore.DebugLevel))

	cfg, err := opts.Config(log)
	mustf(t, err, "proxy config from the Deployment's args")
	in.server, err = cfg.Complete().New()
	mustf(t, err, "proxy")
	runCtx, stop := context.WithCancel(context.Background())
	in.stopProxy = stop
	in.proxyDone = make(chan error, 1)
	go func() { in.proxyDone <- in.server.Run(runCtx) }()
	in.proxyURL = "https://" + in.server.SecureAddr().String()
	in.metricsURL = "http://" + in.server.MetricsAddr().String()
	eventually(t, 60*time.Second, "proxy /readyz", func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.metricsURL+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

// throughProxy is a config for the proxy with cfg's credentials, trusting
// the CA the init step created.
func (in *installation) throughProxy(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Host = in.proxyURL
	out.TLSClientConfig.CAData = append([]byte(nil), in.caPEM...)
	out.TLSClientConfig.CAFile = ""
	out.TLSClientConfig.ServerName = ""
	return out
}

// logLine is one JSON line of the proxy's log.
type logLine map[string]any

func (l logLine) str(key string) string {
	s, _ := l[key].(string)
	return s
}

// logLines returns the proxy's log so far.
func (in *installation) logLines(t *testing.T) []logLine {
	t.Helper()
	data, err := os.ReadFile(in.logPath)
	mustf(t, err, "proxy log")
	var out []logLine
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for s.Scan() {
		var l logLine
		if json.Unmarshal(s.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// decisions returns the decision lines about namespace/resource (name ""
// for any).
func (in *installation) decisions(t *testing.T, namespace, resource, name string) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range in.logLines(t) {
		if l.str("msg") == "kausality decision" && l.str("namespace") == namespace && l.str("resource") == resource &&
			(name == "" || l.str("name") == name) {
			out = append(out, l)
		}
	}
	return out
}

// count counts the decision lines by user ("" any) with the decision and
// category ("" any).
func count(lines []logLine, user, decision, category string) int {
	n := 0
	for _, l := range lines {
		if (user == "" || l.str("user") == user) && l.str("decision") == decision && (category == "" || l.str("category") == category) {
			n++
		}
	}
	return n
}

// logTail is the end of the proxy log, for failure messages.
func (in *installation) logTail() string {
	data, _ := os.ReadFile(in.logPath)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
