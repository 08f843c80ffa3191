package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
)

// runOnly measures only sc's rows, repeats times on one control plane: the
// short loop for working on one path without the whole of `make bench`,
// whose other rows it skips. It writes no report.
func runOnly(sc scenario, repeats int, workDir string, rc RunConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	scenarios := []scenario{sc}
	if sc.key == scDrift.key {
		// The drift rows write under the parent the Expected rows
		// reconcile.
		scenarios = []scenario{scExpected, scDrift}
	}
	h, p, _, err := startShortLoop(ctx, rc, workDir, sc.key, scenarios...)
	if err != nil {
		return err
	}
	defer h.Stop()
	for run := 1; run <= repeats; run++ {
		for _, w := range h.writeOps(sc, p) {
			if _, ok := driftRows[w.name]; sc.key == scDrift.key && !ok || sc.key != scDrift.key && w.name == driftFloorRowTitle {
				continue
			}
			r, err := h.row(ctx, sc.title, w.name, sc.kind, h.cfg.WriteN, h.cfg.Warmup, w.op)
			if err != nil {
				return err
			}
			fmt.Printf("run %d, %s: p50 direct %.2f, bare %.2f, kausality %.2f ms (%.2fx direct, %.2fx bare); p99 direct %.2f, bare %.2f, kausality %.2f ms; upstream per call: %s\n",
				run, w.name, r.S[direct].P50, r.S[bare].P50, r.S[kausality].P50, r.S[kausality].P50/r.S[direct].P50, r.S[kausality].P50/r.S[bare].P50,
				r.S[direct].P99, r.S[bare].P99, r.S[kausality].P99, r.Upstream)
		}
	}
	return nil
}
