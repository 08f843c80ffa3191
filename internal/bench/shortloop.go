package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startShortLoop starts what a short loop (-cpu-per-write, -only drift)
// measures on: the control plane and the three targets in a run directory
// under workDir named by prefix (returned), the namespaces and parents of
// the write rows, the rotated objects of scenarios, and kausality-proxy's
// caches warm. The caller stops the harness.
func startShortLoop(ctx context.Context, rc RunConfig, workDir, prefix string, scenarios ...scenario) (_ *Harness, _ *pools, runDir string, _ error) {
	runDir = filepath.Join(workDir, prefix+"-"+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, nil, "", err
	}
	logf("work dir %s", runDir)
	h, err := startHarness(ctx, rc, runDir)
	if err != nil {
		return nil, nil, "", err
	}
	ready := func() (*pools, error) {
		for _, ns := range []string{nsWrites, nsPass} {
			if _, err := h.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				return nil, err
			}
		}
		if err := h.setupParents(ctx); err != nil {
			return nil, err
		}
		p := &pools{m: map[string]*appsv1.ReplicaSet{}}
		if err := h.setupPools(ctx, p, scenarios...); err != nil {
			return nil, err
		}
		return p, h.warmInformers(ctx, p)
	}
	p, err := ready()
	if err != nil {
		h.Stop()
		return nil, nil, "", err
	}
	return h, p, runDir, nil
}
