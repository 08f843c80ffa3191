package main

import (
	"context"
	"fmt"
	"path/filepath"
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
	// Per target (bare, kausality): bytes per object after a GC, RSS and
	// Go heap, and CPU per watch event of a child nobody writes.
	Targets                      []string
	ParentRSS, ParentHeap        []float64
	ChildRSS, ChildHeap          []float64
	CPUPerEvent                  []time.Duration
	CreateParents, CreateChilden time.Duration
	// Write is a decided write (a controller's Expected merge patch)
	// while the proxy holds the whole population.
	Write Row
	Load  string
	// ChurnCPUTop and HeapTop are kausality-proxy's CPU profile during the
	// churn and its heap once it holds the population (with -profile).
	ChurnCPUTop, HeapTop string
}

// scaleProfile fills the cluster with parents (Deployments) and their
// children (ReplicaSets), created directly at kube-apiserver, and measures
// what the proxies hold and spend for them.
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
	base, err := h.settledStats(ctx)
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
	withParents, err := h.settledStats(ctx)
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
	withChildren, err := h.settledStats(ctx)
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
	churned, err := h.settledStats(ctx)
	if err != nil {
		return nil, err
	}
	if h.cfg.Profile {
		if err := k.ctl.call(ctx, "/cpuprofile/stop", nil); err != nil {
			return nil, err
		}
		res.ChurnCPUTop = pprofTop(cpuProfile, false, "")
	}
	for i := range proxies {
		res.CPUPerEvent = append(res.CPUPerEvent, (churned[i].CPU()-withChildren[i].CPU())/time.Duration(res.ChurnEvents))
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
	res.Load = loadAvg()
	return res, nil
}

// settledStats waits until both proxies have taken in what the cluster
// sent them (their CPU stands still), then collects garbage and reads
// their stats.
func (h *Harness) settledStats(ctx context.Context) ([]Stats, error) {
	proxies := h.proxies()
	last := make([]time.Duration, len(proxies))
	deadline := time.Now().Add(10 * time.Minute)
	for quiet := 0; quiet < 2; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the proxies were still busy after 10 minutes")
		}
		time.Sleep(2 * time.Second)
		busy := false
		for i, t := range proxies {
			s, err := t.ctl.Stats(ctx)
			if err != nil {
				return nil, err
			}
			// 2 s with under 20 ms of CPU: idle but for its own timers.
			if s.CPU()-last[i] > 20*time.Millisecond {
				busy = true
			}
			last[i] = s.CPU()
		}
		if busy {
			quiet = 0
		} else {
			quiet++
		}
	}
	out := make([]Stats, len(proxies))
	for i, t := range proxies {
		s, err := t.ctl.GC(ctx)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
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

// renderScale writes docs/scale.md.
func renderScale(res *ScaleResult, rc RunConfig, m Machine, command string, started time.Time, took time.Duration, loadStart string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Scale profile\n\n")
	p("Generated by `%s` on %s (%s). Do not edit by hand.\n\n", command, started.UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	p("What the proxy holds and spends for objects it does not decide about, on a real control plane: ")
	p("%d parents (Deployments) and %d children (their ReplicaSets, %d per parent), created directly at kube-apiserver in a namespace nobody writes through a proxy. ",
		res.Parents, res.Children, childrenPerParent)
	p("The proxy's caches of Deployments and ReplicaSets were started before (by decided writes elsewhere), so the population arrives through their watches. ")
	p("Memory is the growth after a garbage collection, divided by the objects added; CPU is the proxy's user+system time during %d label updates of children, divided by the updates. ", res.ChurnEvents)
	p("The bare reverse proxy (no logic, no caches) is the floor.\n\n")
	p("Machine: %s, %d CPUs, %s; load %s at the start, %s at the end. `SCALE=%d`; `make bench-scale` without SCALE runs 10000 parents and 100000 children.\n\n",
		m.CPU, m.NProc, m.Memory, loadStart, res.Load, res.Parents)
	p("| | goal | %s |\n|---|---|%s\n", strings.Join(res.Targets, " | "), strings.Repeat("---|", len(res.Targets)))
	row := func(name, goal string, vals []string) { p("| %s | %s | %s |\n", name, goal, strings.Join(vals, " | ")) }
	kib := func(v []float64) []string {
		out := make([]string, len(v))
		for i, x := range v {
			out[i] = fmt.Sprintf("%.2f KiB", x/1024)
		}
		return out
	}
	row("Go heap per parent", "≤ 4 KiB", kib(res.ParentHeap))
	row("RSS per parent", "", kib(res.ParentRSS))
	row("Go heap per child", "≤ 1 KiB", kib(res.ChildHeap))
	row("RSS per child", "", kib(res.ChildRSS))
	cpu := make([]string, len(res.CPUPerEvent))
	for i, c := range res.CPUPerEvent {
		cpu[i] = fmt.Sprintf("%.3f ms", float64(c)/float64(time.Millisecond))
	}
	row("CPU per watch event of a child nobody writes", "≤ 0.05 ms", cpu)
	p("\n")
	w := res.Write
	p("A decided write beside that population (%s, %d samples): p50 direct %.2f ms, bare %.2f ms, kausality-proxy %.2f ms; upstream requests per write: %s.\n\n",
		w.Name, rc.WriteN, w.S[direct].P50, w.S[bare].P50, w.S[kausality].P50, w.Upstream)
	p("Creating the objects took %s (parents) and %s (children).\n\n", res.CreateParents.Round(time.Millisecond), res.CreateChilden.Round(time.Millisecond))
	p("Not measured here yet: time to ready after a restart, and kube-controller-manager holding the same objects.\n")
	for _, prof := range []struct{ title, top string }{
		{"kausality-proxy's CPU during the churn", res.ChurnCPUTop},
		{"kausality-proxy's heap holding the population (inuse_space)", res.HeapTop},
	} {
		if prof.top != "" {
			p("\n<details><summary>%s</summary>\n\n```\n%s\n```\n</details>\n", prof.title, prof.top)
		}
	}
	return b.String()
}
