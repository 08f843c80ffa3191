// Package testenv runs a real, local Kubernetes control plane for tests and
// for `make run`: etcd and kube-apiserver via controller-runtime's envtest,
// plus an unmodified kube-controller-manager process that can be pointed at
// the apiserver directly or through kausality-proxy.
//
// All binaries come from the repository's ./bin directory, built from pinned
// modules by `make testbin` (hack/testbin/build.sh). Missing binaries are an
// error, never a skip.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// EnvTestBin overrides the directory holding the control-plane binaries.
	EnvTestBin = "KAUSALITY_TESTBIN"
	// EnvKeep names the variable that, when set to a non-empty value other than "0" or "false",
	// keeps the control plane's work directory (logs, audit log,
	// kubeconfigs) after Stop, and Stop prints where it is.
	EnvKeep = "KAUSALITY_TESTENV_KEEP"

	modulePath = "github.com/kausality-io/kausality-proxy"

	// saSigningKeyFile is the name envtest gives the service-account signing
	// key in the apiserver's cert dir (it passes it to the apiserver as
	// --service-account-signing-key-file).
	saSigningKeyFile = "sa-signer.key"

	defaultStartTimeout = 60 * time.Second
	defaultStopTimeout  = 20 * time.Second
)

// Binary names the harness needs in BinDir.
const (
	BinEtcd                  = "etcd"
	BinKubeAPIServer         = "kube-apiserver"
	BinKubeControllerManager = "kube-controller-manager"
	BinKubectl               = "kubectl"
)

// BinDir returns the directory holding the control-plane binaries: the value
// of $KAUSALITY_TESTBIN if set, otherwise ./bin in the repository root, found
// by walking up from the working directory to this module's go.mod.
func BinDir() (string, error) {
	if d := os.Getenv(EnvTestBin); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// RepoRoot walks up from the working directory to the directory whose go.mod
// declares this module. If no such go.mod is found, the nearest go.mod wins.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	nearest := ""
	for dir := wd; ; {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			if nearest == "" {
				nearest = dir
			}
			if goModModule(data) == modulePath {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if nearest != "" {
		return nearest, nil
	}
	return "", fmt.Errorf("testenv: no go.mod found above %s; set $%s to the directory with the control-plane binaries or run `make testbin` from the repository", wd, EnvTestBin)
}

func goModModule(data []byte) string {
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// CheckBinaries returns an error naming every missing binary in dir. The
// error tells the reader to run `make testbin`.
func CheckBinaries(dir string, names ...string) error {
	var missing []string
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("testenv: control-plane binaries missing from %s: %s; run `make testbin` (or set $%s)",
			dir, strings.Join(missing, ", "), EnvTestBin)
	}
	return nil
}

// Options configures a control plane.
type Options struct {
	// AuditLog enables kube-apiserver audit logging at the Metadata level for
	// every request, as JSON lines, to ControlPlane.AuditLogPath.
	AuditLog bool
	// ExtraAPIServerArgs are kube-apiserver flags (without the leading "--").
	// Each one replaces envtest's default for that flag.
	ExtraAPIServerArgs map[string]string
	// ExtraControllerManagerArgs are kube-controller-manager flags (without
	// the leading "--") used by StartControllerManager. Each one replaces the
	// harness's value for that flag.
	ExtraControllerManagerArgs map[string]string
	// WorkDir holds logs, the audit log, the CA file and kubeconfigs. If
	// empty, a temporary directory is created and removed by Stop (unless
	// $KAUSALITY_TESTENV_KEEP is set). A WorkDir given here is never removed.
	WorkDir string
	// StartTimeout bounds how long etcd and kube-apiserver may each take to
	// become healthy. Defaults to 60s (the machines this runs on are small).
	StartTimeout time.Duration
	// CRDDirectories hold CustomResourceDefinitions (YAML) installed once
	// kube-apiserver is up, such as the proxy's own policy kinds.
	CRDDirectories []string
}

// ControlPlane is a running etcd + kube-apiserver (and any controller
// managers started on it).
type ControlPlane struct {
	// AdminConfig is a cluster-admin (system:masters) client-cert config that
	// talks straight to kube-apiserver.
	AdminConfig *rest.Config
	// Host is the apiserver's URL (https://127.0.0.1:PORT/).
	Host string
	// CAData is the PEM CA that signed the apiserver's serving cert.
	CAData []byte
	// CAFile is CAData on disk (for clients and --root-ca-file).
	CAFile string
	// AuditLogPath is the JSON-lines audit log, if Options.AuditLog was set.
	AuditLogPath string
	// APIServerLogPath and EtcdLogPath hold the processes' stdout+stderr.
	APIServerLogPath string
	EtcdLogPath      string
	// WorkDir holds the files above.
	WorkDir string
	// CertDir is envtest's apiserver cert dir (serving cert, client CA,
	// service-account signing key). It is removed by Stop.
	CertDir string
	// ClientCAFile is the CA bundle kube-apiserver trusts for client
	// certificates; AddUser identities are signed by it. A proxy in front
	// of this control plane uses it as its --client-ca-file.
	ClientCAFile string
	// ServiceAccountKeyFile is the service-account signing key (private).
	ServiceAccountKeyFile string
	// BinDir is where the binaries came from.
	BinDir string
	// Env is the underlying envtest environment, for anything not wrapped here.
	Env *envtest.Environment

	opts        Options
	removeWork  bool
	logFiles    []*os.File
	mu          sync.Mutex
	kcms        []*ControllerManager
	kcmSeq      int
	stopped     bool
	adminClient kubernetes.Interface
	// restartedAPIServer is the kube-apiserver RestartAPIServer started, if
	// any; envtest's Stop does not know it.
	restartedAPIServer *apiServerProcess
}

// Start starts etcd and kube-apiserver from BinDir() using envtest. It fails
// (never skips) if the binaries are missing.
//
//nolint:funlen // the control plane's startup is one sequence of steps, each undone on failure
func Start(ctx context.Context, opts Options) (_ *ControlPlane, retErr error) {
	binDir, err := BinDir()
	if err != nil {
		return nil, err
	}
	if err := CheckBinaries(binDir, BinEtcd, BinKubeAPIServer); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	cp := &ControlPlane{BinDir: binDir, opts: opts}
	if opts.WorkDir != "" {
		if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
			return nil, err
		}
		cp.WorkDir = opts.WorkDir
	} else {
		dir, err := os.MkdirTemp("", "kausality-testenv-")
		if err != nil {
			return nil, err
		}
		cp.WorkDir = dir
		cp.removeWork = !keepWorkDir()
	}
	defer func() {
		if retErr != nil {
			_ = cp.Stop()
		}
	}()

	cp.APIServerLogPath = filepath.Join(cp.WorkDir, "kube-apiserver.log")
	apiLog, err := cp.createLog(cp.APIServerLogPath)
	if err != nil {
		return nil, err
	}
	cp.EtcdLogPath = filepath.Join(cp.WorkDir, "etcd.log")
	etcdLog, err := cp.createLog(cp.EtcdLogPath)
	if err != nil {
		return nil, err
	}

	startTimeout := opts.StartTimeout
	if startTimeout == 0 {
		startTimeout = defaultStartTimeout
	}
	apiServer := &envtest.APIServer{
		Path: filepath.Join(binDir, BinKubeAPIServer),
		Out:  apiLog,
		Err:  apiLog,
	}
	etcd := &envtest.Etcd{
		Path: filepath.Join(binDir, BinEtcd),
		Out:  etcdLog,
		Err:  etcdLog,
	}
	args := apiServer.Configure()
	if opts.AuditLog {
		policy := filepath.Join(cp.WorkDir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			return nil, err
		}
		cp.AuditLogPath = filepath.Join(cp.WorkDir, "audit.log")
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", cp.AuditLogPath)
		args.Set("audit-log-format", "json")
		args.Set("audit-log-mode", "blocking")
		args.Set("audit-log-maxbackup", "0")
	}
	for k, v := range opts.ExtraAPIServerArgs {
		args.Set(strings.TrimPrefix(k, "--"), v)
	}

	cp.Env = &envtest.Environment{
		// BinaryAssetsDirectory is what envtest would search; the explicit
		// paths above make sure $KUBEBUILDER_ASSETS/$TEST_ASSET_* in the
		// environment cannot silently swap in other binaries.
		BinaryAssetsDirectory: binDir,
		ControlPlane: envtest.ControlPlane{
			APIServer:   apiServer,
			Etcd:        etcd,
			KubectlPath: filepath.Join(binDir, BinKubectl),
		},
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  defaultStopTimeout,
		CRDDirectoryPaths:        opts.CRDDirectories,
		ErrorIfCRDPathMissing:    len(opts.CRDDirectories) > 0,
	}
	cfg, err := cp.Env.Start()
	if err != nil {
		return nil, fmt.Errorf("testenv: starting etcd + kube-apiserver from %s: %w (apiserver log: %s, etcd log: %s)",
			binDir, err, cp.APIServerLogPath, cp.EtcdLogPath)
	}
	cp.AdminConfig = rest.CopyConfig(cfg)
	cp.Host = cfg.Host
	cp.CAData = append([]byte(nil), apiServer.SecureServing.CA...)
	cp.CertDir = apiServer.CertDir
	cp.ServiceAccountKeyFile = filepath.Join(cp.CertDir, saSigningKeyFile)
	cp.ClientCAFile = filepath.Join(cp.CertDir, "client-cert-auth-ca.crt")
	if err := CheckFile(cp.ClientCAFile); err != nil {
		return nil, fmt.Errorf("testenv: envtest's client CA: %w", err)
	}
	if _, err := os.Stat(cp.ServiceAccountKeyFile); err != nil {
		return nil, fmt.Errorf("testenv: envtest's service-account signing key not where expected: %w", err)
	}
	cp.CAFile = filepath.Join(cp.WorkDir, "apiserver-ca.crt")
	if err := os.WriteFile(cp.CAFile, cp.CAData, 0o644); err != nil {
		return nil, err
	}
	cp.adminClient, err = kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return nil, err
	}
	if err := cp.WriteKubeconfig(filepath.Join(cp.WorkDir, "admin.kubeconfig"), cp.AdminConfig); err != nil {
		return nil, err
	}
	return cp, nil
}

// auditPolicy logs every request at the Metadata level.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
`

func keepWorkDir() bool {
	v := os.Getenv(EnvKeep)
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}

func (cp *ControlPlane) createLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cp.logFiles = append(cp.logFiles, f)
	return f, nil
}

// Stop stops every controller manager started on this control plane, then
// kube-apiserver and etcd, and removes the temporary directories. It is safe
// to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return nil
	}
	cp.stopped = true
	kcms := cp.kcms
	cp.kcms = nil
	cp.mu.Unlock()

	var errs []error
	for _, kcm := range kcms {
		if err := kcm.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := cp.stopRestartedAPIServer(); err != nil {
		errs = append(errs, err)
	}
	if cp.Env != nil {
		if err := cp.Env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("testenv: stopping control plane: %w", err))
		}
	}
	for _, f := range cp.logFiles {
		_ = f.Close()
	}
	if cp.removeWork {
		if err := os.RemoveAll(cp.WorkDir); err != nil {
			errs = append(errs, err)
		}
	} else if cp.opts.WorkDir == "" && cp.WorkDir != "" {
		fmt.Fprintf(os.Stderr, "testenv: kept control-plane work dir %s\n", cp.WorkDir)
	}
	return kerrors.NewAggregate(errs)
}

// AddUser returns a client-cert config, straight to kube-apiserver, for a
// user with the given name and groups (envtest's AddUser). The identity has
// no permissions beyond what RBAC grants to its name and groups.
func (cp *ControlPlane) AddUser(name string, groups []string) (*rest.Config, error) {
	u, err := cp.Env.AddUser(envtest.User{Name: name, Groups: groups}, &rest.Config{QPS: 1000, Burst: 2000})
	if err != nil {
		return nil, fmt.Errorf("testenv: adding user %q: %w", name, err)
	}
	return rest.CopyConfig(u.Config()), nil
}

// AdminClient returns a clientset for AdminConfig.
func (cp *ControlPlane) AdminClient() kubernetes.Interface {
	return cp.adminClient
}

// ServiceAccountToken creates the service account namespace/name if needed
// and mints a token for it with the TokenRequest API (default expiry).
func (cp *ControlPlane) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := cp.adminClient.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("testenv: creating service account %s/%s: %w", namespace, name, err)
	}
	tr, err := cp.adminClient.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("testenv: requesting token for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountConfig is a bearer-token config for namespace/name, straight
// to kube-apiserver (see ServiceAccountToken).
func (cp *ControlPlane) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	tok, err := cp.ServiceAccountToken(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            cp.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), cp.CAData...)},
		BearerToken:     tok,
		QPS:             1000,
		Burst:           2000,
	}, nil
}

// errStopped is returned when using a stopped control plane.
var errStopped = errors.New("testenv: control plane is stopped")

// CheckFile reports whether path exists and is a regular file.
func CheckFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	return nil
}
