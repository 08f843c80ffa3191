package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runDriftOnly measures only the drift scenario's rows, repeats times on
// one control plane: the short loop for working on the drift path without
// the whole of `make bench`, whose other rows it skips. It writes no
// report.
func runDriftOnly(repeats int, workDir string, rc RunConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	runDir := filepath.Join(workDir, "drift-"+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	logf("work dir %s", runDir)
	h, err := startHarness(ctx, rc, runDir)
	if err != nil {
		return err
	}
	defer h.Stop()
	for _, ns := range []string{nsWrites, nsPass} {
		if _, err := h.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := h.setupParents(ctx); err != nil {
		return err
	}
	p := &pools{m: map[string]*appsv1.ReplicaSet{}}
	if err := h.setupPools(ctx, p, scExpected, scDrift); err != nil {
		return err
	}
	if err := h.warmInformers(ctx, p); err != nil {
		return err
	}
	for run := 1; run <= repeats; run++ {
		for _, w := range h.writeOps(scDrift, p) {
			if _, ok := driftRows[w.name]; !ok {
				continue
			}
			r, err := h.row(ctx, scDrift.title, w.name, scDrift.kind, h.cfg.WriteN, h.cfg.Warmup, w.op)
			if err != nil {
				return err
			}
			fmt.Printf("run %d, %s: p50 direct %.2f, bare %.2f, kausality %.2f ms (%.2fx direct); p99 direct %.2f, bare %.2f, kausality %.2f ms; upstream per call: %s\n",
				run, w.name, r.S[direct].P50, r.S[bare].P50, r.S[kausality].P50, r.S[kausality].P50/r.S[direct].P50,
				r.S[direct].P99, r.S[bare].P99, r.S[kausality].P99, r.Upstream)
		}
	}
	return nil
}
