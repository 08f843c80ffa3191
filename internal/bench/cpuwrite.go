package main

import (
	"context"
	"fmt"
	"os/signal"
	"path/filepath"
	"syscall"
)

// runCPUPerWrite measures only what a write costs the proxies in CPU: an
// intercepted Expected merge patch and a pass-through one, each beside the
// bare proxy, then profiles kausality-proxy under each. It is the short
// loop for working on CPU per write without the whole of `make bench`.
func runCPUPerWrite(perRound, rounds int, workDir string, rc RunConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	h, p, runDir, err := startShortLoop(ctx, rc, workDir, "cpu", scExpected, scPass)
	if err != nil {
		return err
	}
	defer h.Stop()
	k := h.targets[kausality]
	for _, sc := range []scenario{scExpected, scPass} {
		op := h.patchUnderLoad(sc, p)
		l, err := h.load(ctx, "merge PATCH, "+sc.key, 4, perRound, rounds, op)
		if err != nil {
			return err
		}
		fmt.Printf("%s: CPU ms per 1,000 writes: bare %.0f, kausality-proxy %.0f (%.2fx)\n",
			sc.title, l.CPUPer1000(bare), l.CPUPer1000(kausality), l.CPUPer1000(kausality)/l.CPUPer1000(bare))
		if !rc.Profile {
			continue
		}
		// The bare proxy's profile under the same load shows, function by
		// function, what kausality-proxy adds to it.
		for _, t := range []*target{k, h.targets[bare]} {
			cpu := filepath.Join(runDir, "cpu-"+sc.key+".pprof")
			if t != k {
				cpu = filepath.Join(runDir, "cpu-"+sc.key+"-bare.pprof")
			}
			if err := t.ctl.call(ctx, "/cpuprofile/start?path="+cpu, nil); err != nil {
				return err
			}
			err = runWorkers(ctx, 4, perRound*rounds, func(w, i int) error { return op(ctx, t, w, i) })
			if stopErr := t.ctl.call(ctx, "/cpuprofile/stop", nil); err == nil {
				err = stopErr
			}
			if err != nil {
				return err
			}
			fmt.Printf("profile %s\n%s\n", cpu, pprofTop(cpu, true, ""))
		}
	}
	return nil
}
