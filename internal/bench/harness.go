package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

// Namespaces of the fixtures.
const (
	nsRead   = "bench-read"
	nsList   = "bench-list"
	nsBig    = "bench-big"
	nsWatch  = "bench-watch"
	nsExec   = "bench-exec"
	nsWrites = "bench-writes" // intercepted
	nsPass   = "bench-pass"   // excluded in the proxy's --config: pass-through
)

// Field managers of the write scenarios.
const (
	fmController = "bench-controller" // owns the parents' status.observedGeneration
	fmUser       = "bench-user"       // anybody else
)

// proxyConfig is kausality-proxy's --config: the defaults, plus one
// namespace excluded so that the same writes can be measured passing
// through.
const proxyConfig = `apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
excludedNamespaces: [kube-system, kube-public, kube-node-lease, ` + nsPass + `]
`

// Harness is the control plane, the two proxies and the fixtures.
type Harness struct {
	cfg     RunConfig
	cp      *testenv.ControlPlane
	admin   kubernetes.Interface
	targets [numTargets]*target
	// tokenTargets reach the same three endpoints with a service-account
	// bearer token instead of a client certificate.
	tokenTargets [numTargets]*target
	workDir      string

	// parents of the write scenarios, by name.
	parents map[string]*appsv1.Deployment
	// created numbers the objects the CREATE rows make, so that a row
	// measured again (-only with -runs) creates new ones.
	created atomic.Int64
	// K8sVersion is kube-apiserver's /version.
	K8sVersion string
}

// RunConfig sizes the run.
type RunConfig struct {
	GetN, ListN, BigListN, WriteN, UpgradeN, Warmup int
	ListObjects                                     int
	BigObjects                                      int
	Watchers, WatchEvents                           int
	OpenWatches                                     int
	LoadConcurrency, LoadPerRound, LoadRounds       int
	WriteLoadPerRound                               int
	Profile                                         bool
}

// newRunConfig sizes a full run, or with quick the tiny run that checks the
// harness itself.
func newRunConfig(quick bool) RunConfig {
	rc := RunConfig{Profile: true}
	for _, s := range rc.sizes() {
		*s.size = s.full
		if quick {
			*s.size = s.quick
		}
	}
	return rc
}

// runSize is one of a run's sizes with its value in each kind of run, side
// by side so that the two runs differ only where a row says so.
type runSize struct {
	size        *int
	full, quick int
}

func (rc *RunConfig) sizes() []runSize {
	return []runSize{
		{&rc.GetN, 1000, 40}, {&rc.ListN, 100, 2}, {&rc.BigListN, 15, 1}, {&rc.WriteN, 150, 6},
		{&rc.UpgradeN, 200, 6}, {&rc.Warmup, 5, 2},
		{&rc.ListObjects, 5000, 300}, {&rc.BigObjects, 54, 6},
		{&rc.Watchers, 100, 10}, {&rc.WatchEvents, 60, 5}, {&rc.OpenWatches, 1000, 100},
		{&rc.LoadConcurrency, 8, 4}, {&rc.LoadPerRound, 1500, 40}, {&rc.LoadRounds, 6, 1}, {&rc.WriteLoadPerRound, 300, 16},
	}
}

// startHarness starts the control plane, both proxies and all clients.
//
//nolint:funlen // the bench harness's startup is one sequence of steps, each undone on failure
func startHarness(ctx context.Context, rc RunConfig, workDir string) (_ *Harness, retErr error) {
	h := &Harness{cfg: rc, workDir: workDir, parents: map[string]*appsv1.Deployment{}}
	defer func() {
		if retErr != nil {
			h.Stop()
		}
	}()
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	// The proxy's own policy kinds are installed, as in a deployment: its
	// policy informers sync instead of relisting during the measurements.
	h.cp, err = testenv.Start(ctx, testenv.Options{CRDDirectories: []string{filepath.Join(root, "manifests", "base", "crds")}})
	if err != nil {
		return nil, err
	}
	user, err := h.cp.AddUser("bench-admin", []string{"system:masters"})
	if err != nil {
		return nil, err
	}
	user.QPS, user.Burst = 5000, 10000
	h.admin, err = kubernetes.NewForConfig(user)
	if err != nil {
		return nil, err
	}
	h.K8sVersion = kubeModuleVersion()
	if v, err := h.admin.Discovery().ServerVersion(); err == nil && !strings.HasPrefix(v.GitVersion, "v0.0.0") {
		h.K8sVersion = v.GitVersion
	}

	// kausality-proxy is ready only once its namespace exists, as deployed.
	if _, err := h.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kausality-system"}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}

	h.targets[direct], err = newTarget(direct, h.cp.Host, h.cp.CAData, user)
	if err != nil {
		return nil, err
	}
	configFile := filepath.Join(workDir, "kausality-config.yaml")
	if err := os.WriteFile(configFile, []byte(proxyConfig), 0o600); err != nil {
		return nil, err
	}
	for _, idx := range []int{bare, kausality} {
		identity, err := h.cp.AddUser(targetNames[idx]+"-proxy", []string{"system:masters"})
		if err != nil {
			return nil, err
		}
		// envtest's host ends in "/"; kausality-proxy's upstream probe
		// appends "/readyz" to it, and "//readyz" is a 404 that keeps the
		// proxy unready. Use the host without the slash.
		identity.Host = strings.TrimSuffix(identity.Host, "/")
		kubeconfig := filepath.Join(workDir, targetNames[idx]+"-proxy.kubeconfig")
		if err := testenv.WriteKubeconfig(kubeconfig, identity); err != nil {
			return nil, err
		}
		child, ready, err := startChild(ctx, childSpec{
			Role: targetNames[idx], Kubeconfig: kubeconfig, ClientCAFile: h.cp.ClientCAFile,
			WorkDir: workDir, ConfigFile: configFile,
		})
		if err != nil {
			return nil, err
		}
		t, err := newTarget(idx, ready.ServeURL, ready.CAData, user)
		if err != nil {
			child.stop()
			return nil, err
		}
		t.ctl, t.cmd, t.stdin, t.pid = child.ctl, child.cmd, child.stdin, child.pid
		h.targets[idx] = t
	}

	// A service account with a bearer token, for the token-passthrough GET.
	token, err := h.cp.ServiceAccountToken(ctx, "default", "bench-sa")
	if err != nil {
		return nil, err
	}
	_, err = h.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-sa"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "bench-sa"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	tokenUser := &rest.Config{BearerToken: token}
	for idx, t := range h.targets {
		caData := t.cfg.TLSClientConfig.CAData
		h.tokenTargets[idx], err = newTarget(idx, t.base, caData, tokenUser)
		if err != nil {
			return nil, err
		}
	}
	return h, nil
}

// kubeModuleVersion is the k8s.io/kubernetes version ./bin is built from
// (binaries built from modules report v0.0.0-master in /version).
func kubeModuleVersion() string {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "?"
	}
	data, err := os.ReadFile(filepath.Join(root, "hack", "testbin", "kube", "go.mod"))
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "k8s.io/kubernetes" {
				return f[i+1] + " (k8s.io/kubernetes, hack/testbin/kube/go.mod)"
			}
		}
	}
	return "?"
}

// Stop stops the proxies and the control plane.
func (h *Harness) Stop() {
	for _, t := range h.targets {
		if t != nil {
			t.stop()
		}
	}
	if h.cp != nil {
		_ = h.cp.Stop()
	}
}

// proxies are the targets with a process of their own.
func (h *Harness) proxies() []*target { return []*target{h.targets[bare], h.targets[kausality]} }

// setupFixtures creates everything the operations read and write.
func (h *Harness) setupFixtures(ctx context.Context) error {
	for _, ns := range []string{nsRead, nsList, nsBig, nsWatch, nsExec, nsWrites, nsPass} {
		if _, err := h.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	cms := h.admin.CoreV1()
	if _, err := cms.ConfigMaps(nsRead).Create(ctx, configMap("get-target", 400, 0), metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cms.ConfigMaps(nsWatch).Create(ctx, configMap("watch-target", 64, 0), metav1.CreateOptions{}); err != nil {
		return err
	}
	start := time.Now()
	if err := parallel(ctx, 16, h.cfg.ListObjects, func(i int) error {
		_, err := cms.ConfigMaps(nsList).Create(ctx, configMap(fmt.Sprintf("cm-%05d", i), 400, i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	// ConfigMaps are limited to 1 MiB; 54 of 1,000,000 bytes make > 50 MiB.
	if err := parallel(ctx, 4, h.cfg.BigObjects, func(i int) error {
		_, err := cms.ConfigMaps(nsBig).Create(ctx, configMap(fmt.Sprintf("big-%03d", i), 1_000_000, i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	logf("fixtures: %d + %d ConfigMaps in %s", h.cfg.ListObjects, h.cfg.BigObjects, time.Since(start).Round(time.Millisecond))

	// A pod that no kubelet will ever run: exec to it gets the
	// apiserver's 400 after a full upgrade round trip.
	no := false
	if _, err := cms.ServiceAccounts(nsExec).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cms.Pods(nsExec).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "exec-target"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers:                   []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	return h.setupParents(ctx)
}

// setupParents creates the Deployments the write scenarios' ReplicaSets
// belong to. Nothing reconciles them (no kube-controller-manager): their
// status is written once, by the field manager bench-controller, which the
// proxy therefore identifies as their controller (managedFields owner of
// status.observedGeneration). They carry kausality.io/phase: initialized
// already, so the proxy has no reason to write them.
//
//   - reconciling: generation 2, observedGeneration 1: the controller's
//     writes are Expected (the hot path of every controller);
//   - stable: generation == observedGeneration and rolled out (settled at
//     its spec): another actor's writes are a NewOrigin, the controller's
//     are drift.
func (h *Harness) setupParents(ctx context.Context) error {
	for _, p := range []struct {
		ns, name string
		stable   bool
	}{
		{nsWrites, "reconciling", false},
		{nsWrites, "stable", true},
		{nsPass, "reconciling", false},
	} {
		deps := h.admin.AppsV1().Deployments(p.ns)
		d := deployment(p.name)
		d, err := deps.Create(ctx, d, metav1.CreateOptions{FieldManager: fmUser})
		if err != nil {
			return err
		}
		d.Spec.MinReadySeconds = 1 // generation 2
		if d, err = deps.Update(ctx, d, metav1.UpdateOptions{FieldManager: fmUser}); err != nil {
			return err
		}
		obs := d.Generation - 1
		if p.stable {
			obs = d.Generation
		}
		// A rolled-out Deployment: with its observedGeneration caught up,
		// kstatus says Current, so the stable parent is settled at its spec.
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: obs,
			Conditions: []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "Bench",
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}, {
				Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable",
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		}
		if d, err = deps.UpdateStatus(ctx, d, metav1.UpdateOptions{FieldManager: fmController}); err != nil {
			return err
		}
		h.parents[p.ns+"/"+p.name] = d
	}
	return nil
}

func deployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	zero := int32(0)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kausality.io/phase": "initialized"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr(intstr.FromString("25%")), MaxSurge: ptr(intstr.FromString("25%")),
			}},
			Template: podTemplate(labels),
		},
	}
}

func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "bench"}},
		}}},
	}
}

func ptr[T any](v T) *T { return &v }

func configMap(name string, size, seed int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "true", "shard": fmt.Sprint(seed % 10)}},
		Data:       map[string]string{"payload": filler(size, seed)},
	}
}

func filler(n, seed int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	var b strings.Builder
	b.Grow(n)
	for i := 0; i < n; i++ {
		b.WriteByte(alphabet[(i*7+seed)%len(alphabet)])
	}
	return b.String()
}

// parallel runs fn(0..n-1) on `workers` goroutines; the first error wins.
func parallel(ctx context.Context, workers, n int, fn func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		err1 error
		next = make(chan int)
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if err1 == nil {
						err1 = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		mu.Lock()
		failed := err1 != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err1 == nil {
		err1 = ctx.Err()
	}
	return err1
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
