package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
)

// runDriftOnly measures only the drift scenario's rows, repeats times on
// one control plane: the short loop for working on the drift path without
// the whole of `make bench`, whose other rows it skips. It writes no
// report.
func runDriftOnly(repeats int, workDir string, rc RunConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	h, p, _, err := startShortLoop(ctx, rc, workDir, "drift", scExpected, scDrift)
	if err != nil {
		return err
	}
	defer h.Stop()
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
