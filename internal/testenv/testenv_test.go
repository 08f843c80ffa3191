package testenv_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

// startControlPlane starts a control plane or fails the test: missing
// binaries are a failure, never a skip.
func startControlPlane(t *testing.T, opts testenv.Options) *testenv.ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := testenv.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Logf("control plane up in %s at %s (work dir %s)", time.Since(start).Round(time.Millisecond), cp.Host, cp.WorkDir)
	t.Cleanup(func() {
		if t.Failed() {
			dumpTail(t, "kube-apiserver", cp.APIServerLogPath, 30)
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
	})
	return cp
}

func dumpTail(t *testing.T, what, path string, n int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s log %s: %v", what, path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("last %d lines of %s log %s:\n%s", len(lines), what, path, strings.Join(lines, "\n"))
}

func TestBinariesPresent(t *testing.T) {
	dir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.CheckBinaries(dir, testenv.BinEtcd, testenv.BinKubeAPIServer, testenv.BinKubeControllerManager, testenv.BinKubectl); err != nil {
		t.Fatal(err)
	}
}

func TestMissingBinariesFailLoudly(t *testing.T) {
	t.Setenv(testenv.EnvTestBin, t.TempDir())
	_, err := testenv.Start(context.Background(), testenv.Options{})
	if err == nil {
		t.Fatal("Start succeeded without binaries")
	}
	if !strings.Contains(err.Error(), "run `make testbin`") {
		t.Fatalf("error does not tell the reader to run `make testbin`: %v", err)
	}
}

// authProblem matches log lines where the controller manager was refused by
// authentication or authorization. The startup flag dump (FLAG: --...,
// e.g. --authorization-webhook-cache-unauthorized-ttl) is excluded.
var authProblem = regexp.MustCompile(`(?i)unauthorized|forbidden|is not allowed to|cannot (get|list|watch|create|update|patch|delete) resource`)

func TestControlPlaneWithControllerManager(t *testing.T) {
	cp := startControlPlane(t, testenv.Options{AuditLog: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	admin, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}

	// The admin kubeconfig written by the harness is usable.
	kc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(cp.WorkDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(kc).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("admin kubeconfig: %v", err)
	}

	const ns = "default"
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32), // 0
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}

	kcmStart := time.Now()
	kcm, err := cp.StartControllerManager(ctx, cp.AdminConfig.Host, cp.CAData)
	if err != nil {
		t.Fatalf("starting kube-controller-manager: %v", err)
	}
	t.Logf("kube-controller-manager ready in %s; args: %s", time.Since(kcmStart).Round(time.Millisecond), strings.Join(kcm.Args, " "))
	t.Cleanup(func() {
		if t.Failed() {
			dumpTail(t, "kube-controller-manager", kcm.LogPath, 60)
		}
	})

	// The deployment controller creates a ReplicaSet and marks the
	// Deployment Available.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		rss, err := admin.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		owned := false
		for _, rs := range rss.Items {
			if ref := metav1.GetControllerOf(&rs); ref != nil && ref.Kind == "Deployment" && ref.Name == "web" {
				owned = true
			}
		}
		if !owned {
			return false, nil
		}
		d, err := admin.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
				return d.Status.ObservedGeneration == d.Generation, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("deployment never got a ReplicaSet and Available=True: %v", err)
	}

	// The ReplicaSet was written by the deployment controller's own service
	// account (--use-service-account-credentials), which proves per-controller
	// tokens were minted via TokenRequest and accepted.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := cp.AuditEvents()
		if err != nil {
			return false, err
		}
		var rsBySA, tokenByKCM bool
		for _, ev := range evs {
			if ev.ObjectRef == nil || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 201 || ev.Verb != "create" {
				continue
			}
			switch {
			case ev.ObjectRef.Resource == "replicasets" &&
				ev.User.Username == "system:serviceaccount:kube-system:deployment-controller":
				rsBySA = true
			case ev.ObjectRef.Resource == "serviceaccounts" && ev.ObjectRef.Subresource == "token" &&
				ev.ObjectRef.Name == "deployment-controller" && ev.User.Username == testenv.KubeControllerManagerUser:
				tokenByKCM = true
			}
		}
		return rsBySA && tokenByKCM, nil
	}); err != nil {
		t.Fatalf("audit log lacks a TokenRequest for deployment-controller by %s and a ReplicaSet create by system:serviceaccount:kube-system:deployment-controller: %v",
			testenv.KubeControllerManagerUser, err)
	}

	// Let the controller manager settle a moment, then check it was never
	// refused by authn/authz.
	time.Sleep(2 * time.Second)
	if exited, err := kcm.Exited(); exited {
		t.Fatalf("kube-controller-manager exited: %v", err)
	}
	log, err := kcm.Log()
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, line := range strings.Split(log, "\n") {
		if authProblem.MatchString(line) && !strings.Contains(line, "FLAG: --") {
			bad = append(bad, line)
		}
	}
	if len(bad) > 0 {
		t.Errorf("kube-controller-manager log has %d auth failures, e.g.:\n%s", len(bad), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}

	if err := kcm.Stop(); err != nil {
		t.Errorf("stopping kube-controller-manager: %v", err)
	}
	if exited, _ := kcm.Exited(); !exited {
		t.Error("kube-controller-manager still running after Stop")
	}
	if _, err := os.Stat(kcm.LogPath); err != nil {
		t.Errorf("log gone after Stop: %v", err)
	}
}

func TestAddUserIsRBACChecked(t *testing.T) {
	cp := startControlPlane(t, testenv.Options{AuditLog: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cfg, err := cp.AddUser("alice", []string{"team-a"})
	if err != nil {
		t.Fatal(err)
	}
	alice := kubernetes.NewForConfigOrDie(cfg)
	_, err = alice.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("alice without bindings listing secrets: want Forbidden, got %v", err)
	}
	if !strings.Contains(err.Error(), `User "alice"`) {
		t.Errorf("forbidden error does not name alice: %v", err)
	}

	// Through a kubeconfig file the same identity is used.
	path := filepath.Join(t.TempDir(), "alice.kubeconfig")
	if err := cp.WriteKubeconfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	fileCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(fileCfg).CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice via kubeconfig: want Forbidden, got %v", err)
	}

	// A service-account token minted by the harness is authenticated as the
	// service account (and, without bindings, forbidden too).
	tok, err := cp.ServiceAccountToken(ctx, "default", "bot")
	if err != nil {
		t.Fatal(err)
	}
	saCfg, err := cp.ServiceAccountConfig(ctx, "default", "bot")
	if err != nil {
		t.Fatal(err)
	}
	if tok == "" || saCfg.BearerToken == "" {
		t.Fatal("empty service-account token")
	}
	_, err = kubernetes.NewForConfigOrDie(saCfg).CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:serviceaccount:default:bot") {
		t.Fatalf("service account listing secrets: want Forbidden naming it, got %v", err)
	}

	// The audit log recorded alice's request, with its 403.
	var found bool
	evs, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.User.Username == "alice" && ev.Verb == "list" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "secrets" &&
			ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403 && string(ev.Stage) == "ResponseComplete" {
			found = true
			if string(ev.Level) != "Metadata" {
				t.Errorf("audit level %s, want Metadata", ev.Level)
			}
			if !containsString(ev.User.Groups, "team-a") {
				t.Errorf("audit user groups %v lack team-a", ev.User.Groups)
			}
		}
	}
	if !found {
		t.Fatalf("audit log %s has no forbidden list of secrets by alice (%d events)", cp.AuditLogPath, len(evs))
	}
}

// Several control planes, one after the other, in one test binary.
func TestSequentialControlPlanes(t *testing.T) {
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cp, err := testenv.Start(ctx, testenv.Options{ExtraAPIServerArgs: map[string]string{"event-ttl": "5m"}})
		cancel()
		if err != nil {
			t.Fatalf("start #%d: %v", i, err)
		}
		workDir, certDir := cp.WorkDir, cp.CertDir
		_, err = kubernetes.NewForConfigOrDie(cp.AdminConfig).CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-here"}}, metav1.CreateOptions{})
		if err != nil {
			_ = cp.Stop()
			t.Fatalf("#%d: creating namespace (a fresh etcd must not have it): %v", i, err)
		}
		if err := cp.Stop(); err != nil {
			t.Fatalf("stop #%d: %v", i, err)
		}
		if err := cp.Stop(); err != nil {
			t.Fatalf("second stop #%d: %v", i, err)
		}
		if os.Getenv(testenv.EnvKeep) == "" {
			if _, err := os.Stat(workDir); !os.IsNotExist(err) {
				t.Errorf("work dir %s not removed by Stop: %v", workDir, err)
			}
		}
		if _, err := os.Stat(certDir); !os.IsNotExist(err) {
			t.Errorf("cert dir %s not removed by Stop: %v", certDir, err)
		}
	}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
