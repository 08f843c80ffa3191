//go:build hardening

// Package hardening runs kausality-proxy as it is deployed, two replicas of
// the real binary in front of one kube-apiserver, and puts it under load,
// faults and hostile clients: writes of twenty controllers with a ledger
// that every accepted write is in etcd exactly once, kube-apiserver killed
// and restarted, a replica killed with SIGKILL, a replica cut off from
// kube-apiserver, slow-loris connections, huge headers and idle
// connections. The figures it measures go to $KAUSALITY_HARDENING_FIGURES
// (JSON), from which `make test-hardening` writes docs/reliability.md.
//
// It needs the control-plane binaries (`make testbin`); without them it
// fails, never skips.
package hardening

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/internal/reliability"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

// envFigures names the file the suite writes its figures to.
const envFigures = "KAUSALITY_HARDENING_FIGURES"

// numReplicas proxies run side by side, as the manifests deploy them.
const numReplicas = 2

// env is the control plane and the proxy replicas every test uses.
var env struct {
	cp       *testenv.ControlPlane
	workDir  string
	binary   string
	replicas [numReplicas]*replica
	admin    dynamic.Interface
	figures  reliability.Figures
}

// recordNamespace is the replicas' namespace: their approval
// reservation records are kept there.
const recordNamespace = "kausality-system"

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hardening:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cp, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		return 1, err
	}
	env.cp = cp
	defer func() {
		for _, r := range env.replicas {
			if r != nil {
				r.stop()
			}
		}
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "hardening: stopping the control plane:", err)
		}
	}()
	env.workDir = filepath.Join(cp.WorkDir, "hardening")
	if err := os.MkdirAll(env.workDir, 0o755); err != nil {
		return 1, err
	}
	if env.admin, err = dynamic.NewForConfig(adminConfig()); err != nil {
		return 1, err
	}

	// The proxy's own kinds are installed before it starts, as a
	// deployment installs them, so its policy caches sync.
	crds, err := framework.PolicyCRDs()
	if err != nil {
		return 1, err
	}
	crds = append(crds, rigCRD(), tallyCRD())
	if err := framework.InstallCRDs(ctx, cp.AdminConfig, crds...); err != nil {
		return 1, err
	}

	// The replicas record once-approval reservations in their namespace.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: recordNamespace}}
	if _, err := cp.AdminClient().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return 1, err
	}
	if env.binary, err = buildProxy(ctx); err != nil {
		return 1, err
	}
	// The proxy's identity upstream: a cluster admin. The least-privilege
	// role of manifests/ is tested by internal/deploytest; here the
	// subject is what the proxy does under stress, not its RBAC.
	proxyUser, err := cp.AddUser("kausality-proxy", []string{"system:masters"})
	if err != nil {
		return 1, err
	}
	for i := range env.replicas {
		r, err := newReplica(fmt.Sprintf("replica-%d", i), proxyUser)
		if err != nil {
			return 1, err
		}
		env.replicas[i] = r
		if err := r.start(); err != nil {
			return 1, err
		}
	}
	for _, r := range env.replicas {
		if _, err := r.waitReady(ctx); err != nil {
			return 1, err
		}
	}

	code := m.Run()

	env.figures.Machine = reliability.Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
	env.figures.SuiteSeconds = time.Since(start).Seconds()
	if path := os.Getenv(envFigures); path != "" && code == 0 {
		if err := reliability.WriteFigures(path, &env.figures); err != nil {
			return 1, err
		}
	}
	return code, nil
}

// buildProxy builds the kausality-proxy binary once, as `make build`
// does, into the work dir.
func buildProxy(ctx context.Context) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(env.workDir, "kausality-proxy")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/kausality-proxy")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if data, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kausality-proxy: %w\n%s", err, data)
	}
	return out, nil
}

func adminConfig() *rest.Config {
	cfg := rest.CopyConfig(env.cp.AdminConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

// grantNamespace gives user every verb on rigs, their status and tallies
// in namespace: what a controller of those kinds needs, and no more.
func grantNamespace(ctx context.Context, namespace, user string) error {
	kube := env.cp.AdminClient()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "hardening-controller"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{group},
			Resources: []string{"rigs", "rigs/status", "tallies"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}},
	}
	if _, err := kube.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "hardening-controller-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := kube.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
