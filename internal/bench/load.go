package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ListMemory is a proxy's peak memory growth while streaming one LIST.
type ListMemory struct {
	Target             string
	Label              string
	Bytes              int64
	Elapsed            time.Duration
	Peak               MemPeak
	RSSGrowth          int64
	HeapGrowth         int64
	Before             Stats
	RatioToSmallLength float64
}

// listMemory streams LISTs of two sizes through both proxies and samples
// their memory every 2 ms while the bytes flow.
func (h *Harness) listMemory(ctx context.Context) ([]ListMemory, error) {
	cases := []struct {
		label, path string
	}{
		{"5 ConfigMaps of 1 MB (limit=5)", "/api/v1/namespaces/" + nsBig + "/configmaps?limit=5"},
		{fmt.Sprintf("%d ConfigMaps of 1 MB", h.cfg.BigObjects), "/api/v1/namespaces/" + nsBig + "/configmaps"},
	}
	var out []ListMemory
	for _, t := range h.proxies() {
		for _, c := range cases {
			// One unmeasured pass, so that buffers every response needs
			// (TLS records, HTTP/2 frames) exist before the baseline.
			if _, err := t.do(ctx, req{method: http.MethodGet, path: c.path, discard: true}); err != nil {
				return nil, err
			}
			before, err := t.ctl.GC(ctx)
			if err != nil {
				return nil, err
			}
			if err := t.ctl.call(ctx, "/sample/start", nil); err != nil {
				return nil, err
			}
			r, err := t.do(ctx, req{method: http.MethodGet, path: c.path, discard: true})
			if err != nil {
				return nil, err
			}
			var peak MemPeak
			if err := t.ctl.call(ctx, "/sample/stop", &peak); err != nil {
				return nil, err
			}
			m := ListMemory{Target: t.name, Label: c.label, Bytes: r.bytes, Elapsed: r.elapsed, Peak: peak, Before: before,
				RSSGrowth: peak.PeakRSS - peak.BaseRSS, HeapGrowth: int64(peak.PeakHeap) - int64(peak.BaseHeap)}
			logf("LIST %s via %s: %.1f MiB in %s; peak growth RSS %.2f MiB, heap %.2f MiB (%d samples)",
				c.label, t.name, mib(r.bytes), r.elapsed.Round(time.Millisecond), mib(m.RSSGrowth), mib(m.HeapGrowth), peak.Samples)
			out = append(out, m)
		}
	}
	return out, nil
}

// Load is throughput with several requests in flight, and the proxies' CPU
// time per request, for one operation.
type Load struct {
	Name        string
	Concurrency int
	Requests    [numTargets]int
	Wall        [numTargets]time.Duration
	CPU         [numTargets]time.Duration // proxies only
	// RoundCPU is each round's CPU time per target, in the order the
	// rounds ran (proxies only).
	RoundCPU [numTargets][]time.Duration
}

func (l Load) OpsPerSec(i int) float64 { return float64(l.Requests[i]) / l.Wall[i].Seconds() }

// CPUPer1000 is CPU milliseconds per 1,000 requests.
func (l Load) CPUPer1000(i int) float64 { return ms(l.CPU[i]) / float64(l.Requests[i]) * 1000 }

// RoundRatios are the least and the greatest ratio of kausality's CPU to
// the bare proxy's over the rounds: how far one round's verdict could
// have strayed from the whole run's.
func (l Load) RoundRatios() (lowest, highest float64, ok bool) {
	k, b := l.RoundCPU[kausality], l.RoundCPU[bare]
	if len(k) == 0 || len(k) != len(b) {
		return 0, 0, false
	}
	for i := range k {
		r := ratio(float64(k[i]), float64(b[i]))
		if i == 0 || r < lowest {
			lowest = r
		}
		if i == 0 || r > highest {
			highest = r
		}
	}
	return lowest, highest, true
}

// Waiting for a proxy to fall quiet before and after each turn: its work
// left over from earlier requests (watch events of objects other targets
// wrote, drift records settled asynchronously) is not charged to the
// turn, and the work its own requests cause after their answers is.
const (
	quietWindow = 100 * time.Millisecond
	// quietCPU is the CPU a proxy may spend in a quietWindow and still be
	// quiet: 2% of a core, about what an idle proxy's timers and
	// readiness probes cost.
	quietCPU = 2 * time.Millisecond
	// quietLimit bounds the wait, so that a proxy that never falls quiet
	// costs the run time, not the run.
	quietLimit = 5 * time.Second
)

// quiet waits until t's proxy spent at most quietCPU in one quietWindow,
// or quietLimit passed, and returns its Stats then.
func quiet(ctx context.Context, t *target) (Stats, error) {
	last, err := t.ctl.Stats(ctx)
	if err != nil {
		return last, err
	}
	deadline := time.Now().Add(quietLimit)
	for {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(quietWindow):
		}
		now, err := t.ctl.Stats(ctx)
		if err != nil {
			return now, err
		}
		if now.CPU()-last.CPU() <= quietCPU || time.Now().After(deadline) {
			return now, nil
		}
		last = now
	}
}

// load runs `perRound` requests per target with `conc` in flight, for
// `rounds` rounds, targets in rotating order, and reads the proxies' CPU
// time (getrusage) around each target's turn, from the moment the proxy
// is quiet before it to the moment it is quiet after it.
func (h *Harness) load(ctx context.Context, name string, conc, perRound, rounds int, op func(ctx context.Context, t *target, worker, i int) error) (Load, error) {
	l := Load{Name: name, Concurrency: conc}
	for round := 0; round < rounds; round++ {
		for _, idx := range orders[round%len(orders)] {
			t := h.targets[idx]
			var before Stats
			var err error
			if t.ctl != nil {
				if before, err = quiet(ctx, t); err != nil {
					return l, err
				}
			}
			start := time.Now()
			if err := runWorkers(ctx, conc, perRound, func(worker, i int) error { return op(ctx, t, worker, i) }); err != nil {
				return l, err
			}
			l.Wall[idx] += time.Since(start)
			l.Requests[idx] += perRound
			if t.ctl != nil {
				after, err := quiet(ctx, t)
				if err != nil {
					return l, err
				}
				used := after.CPU() - before.CPU()
				l.CPU[idx] += used
				l.RoundCPU[idx] = append(l.RoundCPU[idx], used)
			}
		}
	}
	lo, hi, _ := l.RoundRatios()
	logf("load %-44s ops/s direct %6.0f  bare %6.0f  kausality %6.0f; CPU ms/1000 req bare %.0f kausality %.0f (rounds %.2f–%.2f×)",
		name, l.OpsPerSec(direct), l.OpsPerSec(bare), l.OpsPerSec(kausality), l.CPUPer1000(bare), l.CPUPer1000(kausality), lo, hi)
	return l, nil
}

// runWorkers runs n calls of fn on conc workers; worker w makes calls
// w, w+conc, w+2*conc, ...
func runWorkers(ctx context.Context, conc, n int, fn func(worker, i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += conc {
				if err := fn(w, i); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// loads measures GETs and intercepted and pass-through PATCHes under load.
func (h *Harness) loads(ctx context.Context, p *pools) ([]Load, error) {
	rc := h.cfg
	get := func(ctx context.Context, t *target, _, _ int) error {
		_, err := t.do(ctx, req{method: http.MethodGet, path: "/api/v1/namespaces/" + nsRead + "/configmaps/get-target"})
		return err
	}
	var out []Load
	l, err := h.load(ctx, "GET one ConfigMap", rc.LoadConcurrency, rc.LoadPerRound, rc.LoadRounds, get)
	if err != nil {
		return nil, err
	}
	out = append(out, l)
	for _, sc := range []scenario{scExpected, scPass} {
		op := h.patchUnderLoad(sc, p)
		l, err := h.load(ctx, "merge PATCH, "+sc.title, 4, rc.WriteLoadPerRound, rc.LoadRounds, op)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// patchUnderLoad is a merge PATCH where worker w writes only the pool
// objects k ≡ w (mod 4), so that no two in-flight writes hit one object.
func (h *Harness) patchUnderLoad(sc scenario, p *pools) func(ctx context.Context, t *target, worker, i int) error {
	var op opFunc
	for _, w := range h.writeOps(sc, p) {
		if w.name == "PATCH merge-patch" {
			op = w.op
		}
	}
	return func(ctx context.Context, t *target, worker, i int) error {
		k := worker + 4*((i/4)%(poolSize/4))
		_, err := op(ctx, t, k)
		return err
	}
}

// Profile is a CPU profile of kausality-proxy under one load, and what
// it allocated meanwhile.
type Profile struct {
	Name, Path string
	Requests   int
	Flat, Cum  string
	Allocs     string
}

// profiles records kausality-proxy's CPU profile under a GET load and an
// intercepted-write load (not measured: profiling costs CPU).
func (h *Harness) profiles(ctx context.Context, dir string, p *pools) ([]Profile, error) {
	k := h.targets[kausality]
	get := func(ctx context.Context, t *target, _, _ int) error {
		_, err := t.do(ctx, req{method: http.MethodGet, path: "/api/v1/namespaces/" + nsRead + "/configmaps/get-target"})
		return err
	}
	cases := []struct {
		name, file string
		conc, n    int
		op         func(ctx context.Context, t *target, worker, i int) error
	}{
		{"GET one ConfigMap, 8 in flight", "get", 8, h.cfg.LoadPerRound * 4, get},
		{"intercepted merge PATCH (Expected), 4 in flight", "intercepted-patch", 4, h.cfg.WriteLoadPerRound * 4, h.patchUnderLoad(scExpected, p)},
	}
	var out []Profile
	for _, c := range cases {
		cpu := filepath.Join(dir, "cpu-"+c.file+".pprof")
		allocsBefore := filepath.Join(dir, "allocs-"+c.file+"-before.pprof")
		allocsAfter := filepath.Join(dir, "allocs-"+c.file+".pprof")
		if err := fetch(ctx, k.ctl.base+"/debug/pprof/allocs", allocsBefore); err != nil {
			return nil, err
		}
		if err := k.ctl.call(ctx, "/cpuprofile/start?path="+cpu, nil); err != nil {
			return nil, err
		}
		err := runWorkers(ctx, c.conc, c.n, func(w, i int) error { return c.op(ctx, k, w, i) })
		if stopErr := k.ctl.call(ctx, "/cpuprofile/stop", nil); err == nil {
			err = stopErr
		}
		if err != nil {
			return nil, err
		}
		if err := fetch(ctx, k.ctl.base+"/debug/pprof/allocs", allocsAfter); err != nil {
			return nil, err
		}
		out = append(out, Profile{Name: c.name, Path: cpu, Requests: c.n,
			Flat: pprofTop(cpu, false, ""), Cum: pprofTop(cpu, true, ""),
			Allocs: pprofTop(allocsAfter, false, "alloc_space", "-diff_base="+allocsBefore)})
	}
	return out, nil
}

// pprofTop renders `go tool pprof -top` of a profile.
func pprofTop(path string, cum bool, sampleIndex string, extra ...string) string {
	args := []string{"tool", "pprof", "-top", "-nodecount=25"}
	args = append(args, extra...)
	if cum {
		args = append(args, "-cum")
	}
	if sampleIndex != "" {
		args = append(args, "-sample_index="+sampleIndex)
	}
	args = append(args, path)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		return fmt.Sprintf("(go tool pprof failed: %v)", err)
	}
	// Drop the header lines that name files and the build.
	var keep []string
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Time:") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
