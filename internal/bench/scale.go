package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nsScale holds the scale profile's parents and children. Nobody writes
// them through a proxy: they are the cluster the proxy sits in front of,
// not the writes it decides.
const nsScale = "bench-scale"

// childrenPerParent is the ratio of the scale profile: 10k parents, 100k
// children.
const childrenPerParent = 10

// ScaleResult is what the scale profile measured.
type ScaleResult struct {
	Parents, Children, ChurnEvents int
	// ParentChurnEvents are the label updates of parents, after those of
	// children.
	ParentChurnEvents int
	// Per target (bare, kausality): bytes per object after a GC, RSS and
	// Go heap, and CPU per watch event of a child nobody writes and of a
	// parent nobody writes under.
	Targets               []string
	ParentRSS, ParentHeap []float64
	ChildRSS, ChildHeap   []float64
	CPUPerEvent           []time.Duration
	CPUPerParentEvent     []time.Duration
	// IdleCPU is each proxy's CPU per second with nothing changing, left
	// out of CPUPerEvent; CPUPerEventGross keeps it in.
	IdleCPU, CPUPerEventGross    []time.Duration
	CreateParents, CreateChilden time.Duration
	// Write is a decided write (a controller's Expected merge patch)
	// while the proxy holds the whole population.
	Write Row
	Load  string
	// ChurnCPUTop and HeapTop are kausality-proxy's CPU profile during the
	// churn and its heap once it holds the population (with -profile).
	ChurnCPUTop, HeapTop string
	// ParentChurnCPUTop is kausality-proxy's CPU profile during the
	// parents' churn (with -profile).
	ParentChurnCPUTop string
	// IdleCPUTop is kausality-proxy's CPU profile while nothing changes,
	// holding the population (with -profile).
	IdleCPUTop string
	// RSS is each proxy's resident memory after the churn, holding the
	// population.
	RSS []int64
	// Ready is how long a kausality-proxy started against the populated
	// cluster took until /readyz answered 200; Warm is how long after that
	// until a decided write was answered from its caches alone.
	Ready, Warm time.Duration
	// ControllerManagerRSS is kube-controller-manager's resident memory
	// once it holds the same objects (0: not measured, see
	// ControllerManagerNote).
	ControllerManagerRSS  int64
	ControllerManagerNote string
}

// scaleProfile fills the cluster with parents (Deployments) and their
// children (ReplicaSets), created directly at kube-apiserver, and measures
// what the proxies hold and spend for them.
//
//nolint:funlen // one sequence of measurements, each reading the state the one before left
func (h *Harness) scaleProfile(ctx context.Context, parents int) (*ScaleResult, error) {
	for _, ns := range []string{nsWrites, nsPass, nsScale} {
		if _, err := h.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	if err := h.setupParents(ctx); err != nil {
		return nil, err
	}
	// The decided writes start the proxy's caches of Deployments (parents)
	// and ReplicaSets (children) before the population arrives: it is
	// taken in through their watches, as in a cluster that grows.
	p := &pools{m: map[string]*appsv1.ReplicaSet{}}
	if err := h.setupPools(ctx, p, scExpected); err != nil {
		return nil, err
	}
	if err := h.warmInformers(ctx, p); err != nil {
		return nil, err
	}
	res := &ScaleResult{Parents: parents, Children: parents * childrenPerParent}
	proxies := h.proxies()
	for _, t := range proxies {
		res.Targets = append(res.Targets, t.name)
	}
	_, base, _, err := h.settledStats(ctx, nil)
	if err != nil {
		return nil, err
	}

	start := time.Now()
	uids := make([]types.UID, parents)
	if err := parallel(ctx, 16, parents, func(i int) error {
		d, err := h.admin.AppsV1().Deployments(nsScale).Create(ctx, deployment(fmt.Sprintf("p-%05d", i)), metav1.CreateOptions{FieldManager: fmUser})
		if err == nil {
			uids[i] = d.UID
		}
		return err
	}); err != nil {
		return nil, err
	}
	res.CreateParents = time.Since(start)
	logf("scale: %d parents in %s", parents, res.CreateParents.Round(time.Millisecond))
	_, withParents, _, err := h.settledStats(ctx, nil)
	if err != nil {
		return nil, err
	}

	start = time.Now()
	if err := parallel(ctx, 16, res.Children, func(i int) error {
		_, err := h.admin.AppsV1().ReplicaSets(nsScale).Create(ctx, scaleChild(i, fmt.Sprintf("p-%05d", i%parents), uids[i%parents]), metav1.CreateOptions{FieldManager: fmController})
		return err
	}); err != nil {
		return nil, err
	}
	res.CreateChilden = time.Since(start)
	logf("scale: %d children in %s", res.Children, res.CreateChilden.Round(time.Millisecond))
	_, withChildren, _, err := h.settledStats(ctx, nil)
	if err != nil {
		return nil, err
	}
	for i := range proxies {
		res.ParentRSS = append(res.ParentRSS, perObject(withParents[i].RSS-base[i].RSS, parents))
		res.ParentHeap = append(res.ParentHeap, perObject(int64(withParents[i].HeapInuse)-int64(base[i].HeapInuse), parents))
		res.ChildRSS = append(res.ChildRSS, perObject(withChildren[i].RSS-withParents[i].RSS, res.Children))
		res.ChildHeap = append(res.ChildHeap, perObject(int64(withChildren[i].HeapInuse)-int64(withParents[i].HeapInuse), res.Children))
	}

	k := h.targets[kausality]
	if h.cfg.Profile {
		heap := filepath.Join(h.workDir, "heap-scale.pprof")
		if err := fetch(ctx, k.ctl.base+"/debug/pprof/heap", heap); err != nil {
			return nil, err
		}
		res.HeapTop = pprofTop(heap, false, "inuse_space")
	}

	// A proxy spends CPU on its own timers (leases, rechecks, the
	// runtime's) whether or not anything changes, and the churn takes the
	// longer the busier the machine: on a loaded shared machine that idle
	// CPU was up to a third of the figure. It is measured alone, before the
	// churn, and left out of the CPU per event.
	const idleWindow = 10 * time.Second
	idleProfile := filepath.Join(h.workDir, "cpu-scale-idle.pprof")
	if h.cfg.Profile {
		if err := k.ctl.call(ctx, "/cpuprofile/start?path="+idleProfile, nil); err != nil {
			return nil, err
		}
	}
	idleFrom, idleStart, err := h.proxyStats(ctx)
	if err != nil {
		return nil, err
	}
	time.Sleep(idleWindow)
	churnFrom, idleEnd, err := h.proxyStats(ctx)
	if err != nil {
		return nil, err
	}
	if h.cfg.Profile {
		if err := k.ctl.call(ctx, "/cpuprofile/stop", nil); err != nil {
			return nil, err
		}
		res.IdleCPUTop = pprofTop(idleProfile, false, "")
	}
	for i := range proxies {
		perSecond := float64(idleEnd[i].CPU()-idleStart[i].CPU()) / churnFrom.Sub(idleFrom).Seconds()
		res.IdleCPU = append(res.IdleCPU, time.Duration(perSecond))
	}

	// Churn: label updates of children nobody writes through a proxy, as
	// a cluster's other controllers make all day.
	res.ChurnEvents = min(res.Children, 6000)
	cpuProfile := filepath.Join(h.workDir, "cpu-scale-churn.pprof")
	if h.cfg.Profile {
		if err := k.ctl.call(ctx, "/cpuprofile/start?path="+cpuProfile, nil); err != nil {
			return nil, err
		}
	}
	if err := parallel(ctx, 16, res.ChurnEvents, func(i int) error {
		_, err := h.admin.AppsV1().ReplicaSets(nsScale).Patch(ctx, fmt.Sprintf("c-%06d", i), types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{"churn":"%d"}}}`, i)), metav1.PatchOptions{FieldManager: "someone-else"})
		return err
	}); err != nil {
		return nil, err
	}
	churnQuiet, churned, cycles, err := h.settledStats(ctx, h.stopProfile(ctx, k, cpuProfile, &res.ChurnCPUTop))
	if err != nil {
		return nil, err
	}
	churnTook := churnQuiet.Sub(churnFrom)
	for i, t := range proxies {
		collecting := gcShare(idleEnd[i], churned[i], cycles[i])
		logf("scale: %s, children's churn: one garbage collection %s of CPU, the churn's share %s", t.name, cycles[i].Round(time.Microsecond), collecting.Round(time.Microsecond))
		gross := churned[i].CPU() - idleEnd[i].CPU() + collecting
		idle := time.Duration(float64(res.IdleCPU[i]) * churnTook.Seconds())
		res.CPUPerEventGross = append(res.CPUPerEventGross, gross/time.Duration(res.ChurnEvents))
		res.CPUPerEvent = append(res.CPUPerEvent, max(gross-idle, 0)/time.Duration(res.ChurnEvents))
		res.RSS = append(res.RSS, churned[i].RSS)
	}
	if err := h.churnParents(ctx, res, parents); err != nil {
		return nil, err
	}

	var op opFunc
	for _, w := range h.writeOps(scExpected, p) {
		if w.name == "PATCH merge-patch" {
			op = w.op
		}
	}
	res.Write, err = h.row(ctx, "Scale", fmt.Sprintf("PATCH merge-patch, Expected, beside %d parents and %d children", parents, res.Children), goalInterceptedWrite, h.cfg.WriteN, h.cfg.Warmup, op)
	if err != nil {
		return nil, err
	}
	if err := h.restartKausality(ctx, res, p); err != nil {
		return nil, fmt.Errorf("restarting kausality-proxy: %w", err)
	}
	// Last: kube-controller-manager reconciles the Deployments, which
	// writes the cluster the proxies were measured against.
	h.controllerManagerMemory(ctx, res)
	res.Load = loadAvg()
	return res, nil
}

// churnParents updates the labels of parents nobody writes under, as other
// controllers and people do (a parent's status changes far more often in a
// real cluster, and costs the proxy the same event), and sets the CPU per
// watch event of a parent, the idle CPU measured before the children's
// churn left out.
func (h *Harness) churnParents(ctx context.Context, res *ScaleResult, parents int) error {
	res.ParentChurnEvents = min(parents, 3000)
	k := h.targets[kausality]
	cpuProfile := filepath.Join(h.workDir, "cpu-scale-parents.pprof")
	if h.cfg.Profile {
		if err := k.ctl.call(ctx, "/cpuprofile/start?path="+cpuProfile, nil); err != nil {
			return err
		}
	}
	from, before, err := h.proxyStats(ctx)
	if err != nil {
		return err
	}
	if err := parallel(ctx, 16, res.ParentChurnEvents, func(i int) error {
		_, err := h.admin.AppsV1().Deployments(nsScale).Patch(ctx, fmt.Sprintf("p-%05d", i), types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{"churn":"%d"}}}`, i)), metav1.PatchOptions{FieldManager: "someone-else"})
		return err
	}); err != nil {
		return err
	}
	quiet, after, cycles, err := h.settledStats(ctx, h.stopProfile(ctx, k, cpuProfile, &res.ParentChurnCPUTop))
	if err != nil {
		return err
	}
	took := quiet.Sub(from)
	for i, t := range h.proxies() {
		collecting := gcShare(before[i], after[i], cycles[i])
		logf("scale: %s, parents' churn: one garbage collection %s of CPU, the churn's share %s", t.name, cycles[i].Round(time.Microsecond), collecting.Round(time.Microsecond))
		idle := time.Duration(float64(res.IdleCPU[i]) * took.Seconds())
		res.CPUPerParentEvent = append(res.CPUPerParentEvent, max(after[i].CPU()-before[i].CPU()+collecting-idle, 0)/time.Duration(res.ParentChurnEvents))
	}
	logf("scale: %d parent label updates in %s", res.ParentChurnEvents, took.Round(time.Millisecond))
	return nil
}

// restartKausality replaces kausality-proxy with a fresh process against
// the populated cluster, and measures how long it takes to be ready and
// then to answer a decided write from its caches.
func (h *Harness) restartKausality(ctx context.Context, res *ScaleResult, p *pools) error {
	old := h.targets[kausality]
	old.stop()
	dir := filepath.Join(h.workDir, "restart")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	child, ready, err := startChild(ctx, childSpec{
		Role: roleKausality, Kubeconfig: filepath.Join(h.workDir, targetNames[kausality]+"-proxy.kubeconfig"),
		ClientCAFile: h.cp.ClientCAFile, WorkDir: dir, ConfigFile: filepath.Join(h.workDir, "kausality-config.yaml"),
	})
	if err != nil {
		return err
	}
	res.Ready = time.Since(start)
	t, err := newTarget(kausality, ready.ServeURL, ready.CAData, old.cfg)
	if err != nil {
		child.stop()
		return err
	}
	t.ctl, t.cmd, t.stdin, t.pid = child.ctl, child.cmd, child.stdin, child.pid
	h.targets[kausality] = t
	logf("scale: restarted kausality-proxy ready in %s", res.Ready.Round(time.Millisecond))
	start = time.Now()
	if err := h.warmInformers(ctx, p); err != nil {
		return err
	}
	res.Warm = time.Since(start)
	return nil
}

// controllerManagerMemory starts kube-controller-manager (every default
// controller, directly at kube-apiserver) and reads its RSS once it has
// stopped growing: the memory of a controller platform teams already run
// and size, holding the same objects in its own caches. A failure is
// reported in the document rather than failing the run.
func (h *Harness) controllerManagerMemory(ctx context.Context, res *ScaleResult) {
	cm, err := h.cp.StartControllerManager(ctx, h.cp.Host, h.cp.CAData)
	if err != nil {
		res.ControllerManagerNote = fmt.Sprintf("kube-controller-manager did not start: %v", err)
		return
	}
	defer func() { _ = cm.Stop() }()
	pid := strconv.Itoa(cm.Pid())
	// Settled: three samples 5 s apart within 2% of each other, after
	// at least 30 s; at most 5 minutes.
	start := time.Now()
	var samples []int64
	settled := false
	for !settled && time.Since(start) < 5*time.Minute {
		select {
		case <-ctx.Done():
			res.ControllerManagerNote = ctx.Err().Error()
			return
		case <-time.After(5 * time.Second):
		}
		rss := rssOf(pid)
		if rss == 0 {
			res.ControllerManagerNote = "kube-controller-manager's /proc/" + pid + "/statm could not be read"
			return
		}
		samples = append(samples, rss)
		if n := len(samples); n >= 3 && time.Since(start) >= 30*time.Second {
			lo, hi := slices.Min(samples[n-3:]), slices.Max(samples[n-3:])
			settled = float64(hi-lo) <= 0.02*float64(hi)
		}
	}
	res.ControllerManagerRSS = samples[len(samples)-1]
	if !settled {
		res.ControllerManagerNote = "its RSS was still changing by more than 2% after 5 minutes; the last sample is shown"
	}
	logf("scale: kube-controller-manager RSS %.1f MiB after %s", float64(res.ControllerManagerRSS)/(1<<20), time.Since(start).Round(time.Second))
}

// settledStats waits until both proxies have taken in what the cluster
// sent them (their CPU stands still), then collects garbage and reads
// their stats. The CPU in them, and quiet, are from the last read before
// that collection: a collection the benchmark forces marks every cached
// object, which no watch event makes the proxy do, and charging it to the
// events before it would charge each of them a share of a whole heap's
// marking. What a window's own allocations amount to of such marking is
// charged instead (gcShare), at the CPU of one collection measured here
// (cycles). beforeGC, when not nil, runs between the two (a CPU profile
// ends there, for the same reason).
func (h *Harness) settledStats(ctx context.Context, beforeGC func() error) (quiet time.Time, _ []Stats, cycles []time.Duration, _ error) {
	proxies := h.proxies()
	last := make([]Stats, len(proxies))
	deadline := time.Now().Add(10 * time.Minute)
	for calm := 0; calm < 2; {
		if time.Now().After(deadline) {
			return time.Time{}, nil, nil, fmt.Errorf("the proxies were still busy after 10 minutes")
		}
		time.Sleep(2 * time.Second)
		busy := false
		for i, t := range proxies {
			s, err := t.ctl.Stats(ctx)
			if err != nil {
				return time.Time{}, nil, nil, err
			}
			// 2 s with under 20 ms of CPU: idle but for its own timers.
			if s.CPU()-last[i].CPU() > 20*time.Millisecond {
				busy = true
			}
			last[i] = s
		}
		quiet = time.Now()
		if busy {
			calm = 0
		} else {
			calm++
		}
	}
	if beforeGC != nil {
		if err := beforeGC(); err != nil {
			return time.Time{}, nil, nil, err
		}
	}
	out := make([]Stats, len(proxies))
	cycles = make([]time.Duration, len(proxies))
	for i, t := range proxies {
		s, err := t.ctl.GC(ctx)
		if err != nil {
			return time.Time{}, nil, nil, err
		}
		if n := s.NumGC - last[i].NumGC; n > 0 {
			cycles[i] = (s.CPU() - last[i].CPU()) / time.Duration(n)
		}
		s.CPUUserNs, s.CPUSysNs = last[i].CPUUserNs, last[i].CPUSysNs
		s.TotalAlloc, s.NumGC = last[i].TotalAlloc, last[i].NumGC
		out[i] = s
	}
	return quiet, out, cycles, nil
}

// gcShare is the CPU of collecting garbage that the heap allocations from
// start to end amount to, beyond the collections that ran meanwhile: with
// GOGC, a collection follows every GOGC% of the live heap allocated, and
// each marks the live heap (end, after a collection), at cycle.
func gcShare(start, end Stats, cycle time.Duration) time.Duration {
	if end.GCPercent <= 0 || end.HeapAlloc == 0 {
		return 0
	}
	perCycle := float64(end.HeapAlloc) * float64(end.GCPercent) / 100
	due := float64(end.TotalAlloc-start.TotalAlloc)/perCycle - float64(end.NumGC-start.NumGC)
	return time.Duration(max(due, 0) * float64(cycle))
}

// stopProfile ends the CPU profile of k started into path, when profiling,
// and puts its top in top.
func (h *Harness) stopProfile(ctx context.Context, k *target, path string, top *string) func() error {
	if !h.cfg.Profile {
		return nil
	}
	return func() error {
		if err := k.ctl.call(ctx, "/cpuprofile/stop", nil); err != nil {
			return err
		}
		*top = pprofTop(path, false, "")
		return nil
	}
}

// proxyStats is each proxy's Stats now, without a garbage collection, and
// when they were read.
func (h *Harness) proxyStats(ctx context.Context) (time.Time, []Stats, error) {
	proxies := h.proxies()
	out := make([]Stats, len(proxies))
	for i, t := range proxies {
		s, err := t.ctl.Stats(ctx)
		if err != nil {
			return time.Time{}, nil, err
		}
		out[i] = s
	}
	return time.Now(), out, nil
}

func perObject(delta int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(delta) / float64(n)
}

// scaleChild is child i, a ReplicaSet of its parent Deployment.
func scaleChild(i int, parent string, uid types.UID) *appsv1.ReplicaSet {
	name := fmt.Sprintf("c-%06d", i)
	labels := map[string]string{"app": parent, "set": name}
	yes := true
	zero := int32(0)
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: labels,
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: parent, UID: uid,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(labels),
		},
	}
}

// scaleNotesHeading starts the section of docs/scale.md that people
// write: where the CPU goes and what was tried, with the figures of the
// runs that compared the changes. renderScale keeps it as it finds it, at
// the end: a run's figures alone do not say why they are what they are.
const scaleNotesHeading = "## CPU work"

// scaleNotes is the section of the previous document that starts with
// scaleNotesHeading, up to the next "## " heading or the end, or "".
func scaleNotes(previous string) string {
	i := strings.Index("\n"+previous, "\n"+scaleNotesHeading)
	if i < 0 {
		return ""
	}
	section := previous[i:]
	if j := strings.Index(section[len(scaleNotesHeading):], "\n## "); j >= 0 {
		section = section[:len(scaleNotesHeading)+j+1]
	}
	return strings.TrimRight(section, "\n") + "\n"
}

// renderScale writes docs/scale.md, keeping the hand-written section of
// previous (the document as it was). With several runs, each cell shows
// every run's figure, first run first, so the spread is visible.
//
//nolint:funlen // one document, written top to bottom
func renderScale(runs []*ScaleResult, rc RunConfig, m Machine, command string, started time.Time, took time.Duration, loadStart, previous string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	res := runs[0]
	notes := scaleNotes(previous)
	p("# Scale profile\n\n")
	p("Generated by `%s` on %s (%s). Do not edit by hand", command, started.UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	if notes != "" {
		p(", except the section %q at the end, which it keeps as written", strings.TrimPrefix(scaleNotesHeading, "## "))
	}
	p(".\n\n")
	p("What the proxy holds and spends for objects it does not decide about, on a real control plane: ")
	p("%d parents (Deployments) and %d children (their ReplicaSets, %d per parent), created directly at kube-apiserver in a namespace nobody writes through a proxy. ",
		res.Parents, res.Children, childrenPerParent)
	p("The proxy's caches of Deployments and ReplicaSets were started before (by decided writes elsewhere), so the population arrives through their watches. ")
	p("Memory is the growth after a garbage collection, divided by the objects added; CPU is the proxy's user+system time from the first of %d label updates of children (then of %d parents) until it is quiet again, read before the benchmark forces a garbage collection (which marks every cached object, as no single event makes the proxy do), plus the share of such a collection that the heap allocated meanwhile amounts to under GOGC (the collections that ran meanwhile counted), less what it spends idle in as long (measured over %s before), divided by the updates. ", res.ChurnEvents, res.ParentChurnEvents, "10 s")
	p("The bare reverse proxy (no logic, no caches) is the floor.\n\n")
	loads := make([]string, len(runs))
	for i, r := range runs {
		loads[i] = r.Load
	}
	p("Machine: %s, %d CPUs, %s; load %s at the start, %s at the end. `SCALE=%d`; `make bench-scale` without SCALE runs 10000 parents and 100000 children.\n\n",
		m.CPU, m.NProc, m.Memory, loadStart, strings.Join(loads, " / "), res.Parents)
	if len(runs) > 1 {
		p("%d runs, each on a fresh control plane: every cell shows each run's figure (first / second ...), so the spread between runs is visible.\n\n", len(runs))
	}
	p("| | goal | %s |\n|---|---|%s\n", strings.Join(res.Targets, " | "), strings.Repeat("---|", len(res.Targets)))
	// cells formats figure(run, target) for every target, runs joined.
	cells := func(format func(r *ScaleResult, target int) string) []string {
		out := make([]string, len(res.Targets))
		for t := range out {
			vals := make([]string, len(runs))
			for i, r := range runs {
				vals[i] = format(r, t)
			}
			out[t] = strings.Join(vals, " / ")
		}
		return out
	}
	row := func(name, goal string, vals []string) { p("| %s | %s | %s |\n", name, goal, strings.Join(vals, " | ")) }
	kib := func(pick func(r *ScaleResult) []float64) []string {
		return cells(func(r *ScaleResult, t int) string { return fmt.Sprintf("%.2f KiB", pick(r)[t]/1024) })
	}
	row("Go heap per parent", "≤ 4 KiB", kib(func(r *ScaleResult) []float64 { return r.ParentHeap }))
	row("RSS per parent", "", kib(func(r *ScaleResult) []float64 { return r.ParentRSS }))
	row("Go heap per child", "≤ 1 KiB", kib(func(r *ScaleResult) []float64 { return r.ChildHeap }))
	row("RSS per child", "", kib(func(r *ScaleResult) []float64 { return r.ChildRSS }))
	row("CPU per watch event of a child nobody writes", "≤ 0.05 ms", cells(func(r *ScaleResult, t int) string {
		return fmt.Sprintf("%.3f ms", float64(r.CPUPerEvent[t])/float64(time.Millisecond))
	}))
	if len(res.CPUPerParentEvent) == len(res.Targets) {
		row("CPU per watch event of a parent nobody writes under", "≤ 0.05 ms", cells(func(r *ScaleResult, t int) string {
			if t >= len(r.CPUPerParentEvent) {
				return "–"
			}
			return fmt.Sprintf("%.3f ms", float64(r.CPUPerParentEvent[t])/float64(time.Millisecond))
		}))
	}
	row("RSS holding the population", "kausality-proxy ≤ ½ kube-controller-manager's", cells(func(r *ScaleResult, t int) string {
		return fmt.Sprintf("%.1f MiB", float64(r.RSS[t])/(1<<20))
	}))
	p("\n")
	join := func(f func(r *ScaleResult) string) string {
		vals := make([]string, len(runs))
		for i, r := range runs {
			vals[i] = f(r)
		}
		return strings.Join(vals, " / ")
	}
	verdict := func(r *ScaleResult) string {
		if r.ControllerManagerRSS == 0 {
			return "not measured (" + r.ControllerManagerNote + ")"
		}
		kRSS := float64(r.RSS[len(r.RSS)-1])
		ratio := kRSS / float64(r.ControllerManagerRSS)
		met := "met"
		if ratio > 0.5 {
			met = "missed"
		}
		out := fmt.Sprintf("%.1f MiB (kausality-proxy is %.2f× of it: goal %s)", float64(r.ControllerManagerRSS)/(1<<20), ratio, met)
		if r.ControllerManagerNote != "" {
			out += "; " + r.ControllerManagerNote
		}
		return out
	}
	if len(res.IdleCPU) == len(res.Targets) && len(res.CPUPerEventGross) == len(res.Targets) {
		idle := make([]string, len(res.Targets))
		for t, name := range res.Targets {
			idle[t] = fmt.Sprintf("%s %s", name, join(func(r *ScaleResult) string {
				return fmt.Sprintf("%.1f ms/s (%.3f ms per event with it)", float64(r.IdleCPU[t])/float64(time.Millisecond),
					float64(r.CPUPerEventGross[t])/float64(time.Millisecond))
			}))
		}
		p("CPU of the proxies idle, left out of the CPU per event: %s.\n\n", strings.Join(idle, ", "))
	}
	p("kube-controller-manager holding the same objects: %s. ", join(verdict))
	p("It runs every default controller, connected directly to kube-apiserver, started after the measurements above (its deployment controller adopts the ReplicaSets and creates one more per Deployment, so it holds a little more than the proxies did); its RSS is read from /proc once three samples 5 s apart agree within 2%%.\n\n")
	p("Time to ready after a restart: %s until a kausality-proxy started against the populated cluster answered /readyz with 200 (process start included), then %s until a decided write was answered from its caches alone (no request of its own upstream).\n\n",
		join(func(r *ScaleResult) string { return fmt.Sprintf("%.2f s", r.Ready.Seconds()) }),
		join(func(r *ScaleResult) string { return fmt.Sprintf("%.2f s", r.Warm.Seconds()) }))
	w := res.Write
	p("A decided write beside that population (%s, %d samples): p50 direct %s ms, bare %s ms, kausality-proxy %s ms; upstream requests per write: %s.\n\n",
		w.Name, rc.WriteN,
		join(func(r *ScaleResult) string { return fmt.Sprintf("%.2f", r.Write.S[direct].P50) }),
		join(func(r *ScaleResult) string { return fmt.Sprintf("%.2f", r.Write.S[bare].P50) }),
		join(func(r *ScaleResult) string { return fmt.Sprintf("%.2f", r.Write.S[kausality].P50) }),
		join(func(r *ScaleResult) string { return r.Write.Upstream.String() }))
	p("Creating the objects took %s (parents) and %s (children).\n",
		join(func(r *ScaleResult) string { return r.CreateParents.Round(time.Millisecond).String() }),
		join(func(r *ScaleResult) string { return r.CreateChilden.Round(time.Millisecond).String() }))
	for _, prof := range []struct{ title, top string }{
		{"kausality-proxy's CPU during the churn of children (first run)", res.ChurnCPUTop},
		{"kausality-proxy's CPU during the churn of parents (first run)", res.ParentChurnCPUTop},
		{"kausality-proxy's CPU idle, holding the population (first run)", res.IdleCPUTop},
		{"kausality-proxy's heap holding the population (inuse_space, first run)", res.HeapTop},
	} {
		// An idle proxy's work comes in bursts shorter than the
		// profiler's period, so its profile may hold no sample at all.
		if prof.top != "" && !strings.Contains(prof.top, "Total samples = 0 ") {
			p("\n<details><summary>%s</summary>\n\n```\n%s\n```\n</details>\n", prof.title, prof.top)
		}
	}
	if notes != "" {
		p("\n%s", notes)
	}
	return b.String()
}
