package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// Results is everything one run measured.
type Results struct {
	Started            time.Time
	Duration           time.Duration
	Command            string
	Quick              bool
	RunDir             string
	Config             RunConfig
	Machine            Machine
	K8sVersion         string
	EtcdVersion        string
	LoadStart, LoadEnd string
	Rows               []Row
	Loads              []Load
	ListMemory         []ListMemory
	WatchMemory        []WatchMemory
	WatchMemoryTargets []string
	Profiles           []Profile
	Micro              []MicroResult
	MicroFile          string
	// ScaleDoc is docs/scale.md as the run found it (empty: none).
	ScaleDoc string `json:"-"`
	// Background is what kausality-proxy sent upstream over the run that
	// no call caused (Stats.Background).
	Background map[string]int64
}

// backgroundLine says which of the proxy's own requests are not counted
// per call, and how many there were over the run.
func backgroundLine(bg map[string]int64, d time.Duration) string {
	s := "Its periodic requests, which no call causes, are not counted per call: a GET of its own namespace (readiness) and the DriftReport sender's Lease (get, update)"
	if len(bg) == 0 {
		return s + "."
	}
	keys := make([]string, 0, len(bg))
	for k := range bg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", bg[k], k))
	}
	return fmt.Sprintf("%s; over the run's %s they were %s.", s, d.Round(time.Second), strings.Join(parts, ", "))
}

// Goals: reads within 5% of a bare reverse proxy, intercepted writes with a
// cached parent within 1 ms of direct.
const (
	goalReadP50         = 1.05
	goalReadP99         = 1.10
	goalWriteAddedP50Ms = 1.0
	goalWatchBytes      = 50 * 1024
)

func describeMachine(root string) Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), Modules: map[string]string{}}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		count := 0
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "model name":
				m.CPU = strings.TrimSpace(v)
			case "processor":
				count++
			}
		}
		f.Close()
		m.CPU = fmt.Sprintf("%s (%d logical CPUs in /proc/cpuinfo)", m.CPU, count)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				_, _ = fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
				m.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "k8s.io/apiserver", "k8s.io/client-go", "sigs.k8s.io/controller-runtime", "golang.org/x/net":
				m.Modules[d.Path] = d.Version
			}
		}
	}
	// Read-only git queries.
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			m.Commit += " (with uncommitted changes)"
		}
	}
	return m
}

func etcdVersion(binDir string) string {
	out, err := exec.Command(filepath.Join(binDir, "etcd"), "--version").Output()
	if err != nil {
		return "?"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(strings.TrimPrefix(first, "etcd Version:"))
}

func f2(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func f0(v float64) string {
	if v == 0 || math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

// verdict judges a row against its goal.
func (r Row) verdict() (ok bool, text string) {
	d, b, k := r.S[direct], r.S[bare], r.S[kausality]
	switch r.Kind {
	case goalRead:
		vsDirect := ratio(k.P50, d.P50) <= goalReadP50 && ratio(k.P99, d.P99) <= goalReadP99
		vsBare := ratio(k.P50, b.P50) <= goalReadP50 && ratio(k.P99, b.P99) <= goalReadP99
		switch {
		case vsDirect:
			return true, "✅ vs direct"
		case vsBare:
			return false, "❌ vs direct, ✅ vs bare"
		default:
			return false, "❌ vs direct, ❌ vs bare"
		}
	case goalInterceptedWrite:
		added := k.P50 - d.P50
		extra := r.Upstream != nil && (r.Upstream.OwnTotal() > 0 || r.Upstream.Forwarded > int64(r.Upstream.Calls))
		switch {
		case added <= goalWriteAddedP50Ms && !extra:
			return true, "✅"
		case extra && added > goalWriteAddedP50Ms:
			return false, "❌ time, ❌ extra round trip"
		case extra:
			return false, "❌ extra round trip"
		default:
			return false, "❌ time"
		}
	}
	return true, ""
}

func latencyTable(b *strings.Builder, rows []Row) {
	fmt.Fprintln(b, "| operation | direct p50 / p99 ms | bare p50 / p99 ms | kausality p50 / p99 ms | kausality÷direct p50 / p99 | kausality÷bare p50 / p99 | added p50 ms vs direct | ops/s direct / bare / kausality | kausality upstream requests per call | goal |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		d, br, k := r.S[direct], r.S[bare], r.S[kausality]
		_, v := r.verdict()
		name := r.Name
		if r.Note != "" {
			name += " <br><sub>" + r.Note + "</sub>"
		}
		fmt.Fprintf(b, "| %s | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s | %+.2f | %s / %s / %s | %s | %s |\n",
			name, f2(d.P50), f2(d.P99), f2(br.P50), f2(br.P99), f2(k.P50), f2(k.P99),
			f2(ratio(k.P50, d.P50)), f2(ratio(k.P99, d.P99)), f2(ratio(k.P50, br.P50)), f2(ratio(k.P99, br.P99)),
			k.P50-d.P50, f0(d.OpsPerSec), f0(br.OpsPerSec), f0(k.OpsPerSec), r.Upstream.String(), v)
	}
}

// summaryTable is what `make bench` prints: every row, one section after
// the other.
func summaryTable(res *Results) string {
	var b strings.Builder
	section := ""
	var rows []Row
	flush := func() {
		if len(rows) > 0 {
			fmt.Fprintf(&b, "\n### %s\n\n", section)
			latencyTable(&b, rows)
		}
		rows = nil
	}
	for _, r := range res.Rows {
		if r.Section != section {
			flush()
			section = r.Section
		}
		rows = append(rows, r)
	}
	flush()
	return b.String()
}

//nolint:funlen // writes docs/performance.md top to bottom; split, the document would be scattered over functions
func render(res *Results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# Performance: what kausality-proxy costs")
	p("")
	p("<!-- Generated by internal/bench (`%s`). Do not edit: rerun `make bench`. -->", res.Command)
	p("")
	if res.Quick {
		p("> **Quick run (-quick): sizes are tiny and the numbers mean nothing.**")
		p("")
	}
	p("Measured %s on a real local control plane (etcd %s, kube-apiserver %s from `./bin`), in one run of %s.",
		res.Started.Format("2006-01-02 15:04 MST"), res.EtcdVersion, res.K8sVersion, res.Duration.Round(time.Second))
	p("Every operation runs against three targets, interleaved (iteration *i* runs them in a rotating order):")
	p("**direct** to kube-apiserver, a **bare** `httputil.ReverseProxy` (TLS in, HTTP/2 out, no logic: the floor of any proxy),")
	p("and **kausality**-proxy. Ratios come from this one run. See [Method](#method).")
	p("")

	p("## Verdicts")
	p("")
	writeVerdicts(&b, res)
	p("")
	p("### Cost goals")
	p("")
	p("What a read or a write may cost beyond the bare reverse proxy (the drift path: beyond direct), judged on this run;")
	p("the goals for the objects the proxy never decides about are in [Scale](#scale).")
	p("")
	writeCostGoals(&b, res)
	p("")

	p("## Latency")
	p("")
	p("p50 and p99 are nearest-rank percentiles over the measured iterations (warm-up excluded; with fewer than 100")
	p("iterations p99 is the maximum, see the sizes in [Method](#method)); ops/s is sequential")
	p("throughput (one request in flight: iterations ÷ time spent in them). \"kausality upstream requests per call\" is what")
	p("kausality-proxy sent to kube-apiserver per request during the row, counted at its transports: `fwd` is the forwarded")
	p("request itself, anything else is the proxy's own clients (`get deployments` is a live GET; informers' long-running")
	p("watches are not counted). Only requests a call causes are counted: the proxy's periodic requests (the readiness probe")
	p("of its own namespace and the renewal of the DriftReport sender's Lease) run whatever the calls, and are listed apart")
	p("in [Method](#method).")
	b.WriteString(summaryTable(res))
	p("")

	p("## Throughput under load and CPU per request")
	p("")
	p("Each target gets the same number of requests with several in flight, in %d rounds, targets in rotating order.", res.Config.LoadRounds)
	p("CPU is the proxy process's user+system time (getrusage) over its turns. A turn's CPU is read from the moment the proxy")
	p("is quiet before it (at most %s of CPU in %s, or after %s) to the moment it is quiet after it: work left over from",
		quietCPU, quietWindow, quietLimit)
	p("other targets' turns is not charged to it, and the work its own requests cause after their answers is. The last column")
	p("is the least and the greatest kausality÷bare CPU ratio of a single round, the spread the whole run's ratio evens out.")
	p("")
	p("| operation | in flight | requests per target | ops/s direct / bare / kausality | kausality÷bare ops/s | CPU ms per 1,000 requests: bare / kausality | kausality÷bare CPU, whole run (single rounds) |")
	p("|---|---|---|---|---|---|---|")
	for _, l := range res.Loads {
		rounds := "–"
		if lo, hi, ok := l.RoundRatios(); ok {
			rounds = fmt.Sprintf("%s (%s–%s)", f2(ratio(l.CPUPer1000(kausality), l.CPUPer1000(bare))), f2(lo), f2(hi))
		}
		p("| %s | %d | %d | %s / %s / %s | %s | %s / %s | %s |", l.Name, l.Concurrency, l.Requests[direct],
			f0(l.OpsPerSec(direct)), f0(l.OpsPerSec(bare)), f0(l.OpsPerSec(kausality)), f2(ratio(l.OpsPerSec(kausality), l.OpsPerSec(bare))),
			f0(l.CPUPer1000(bare)), f0(l.CPUPer1000(kausality)), rounds)
	}
	p("")

	p("## Memory")
	p("")
	p("### Open watches")
	p("")
	p("The proxy's memory after a GC, before and with %d open watches of one ConfigMap (each has delivered one event).", res.Config.OpenWatches)
	p("")
	p("Judged by the larger of RSS growth and Go heap + stack growth per watch (RSS alone can hide growth into pages that")
	p("were resident already).")
	p("")
	p("| proxy | RSS before → with watches (MiB) | RSS per watch (KiB) | heap in use per watch (KiB) | goroutine stacks per watch (KiB) | goroutines per watch | goal < 50 KiB per watch |")
	p("|---|---|---|---|---|---|---|")
	for i, m := range res.WatchMemory {
		ok := "✅"
		if m.perWatch() >= goalWatchBytes {
			ok = "❌"
		}
		p("| %s | %.1f → %.1f | %.1f | %.1f | %.1f | %.1f | %s %.1f KiB |", res.WatchMemoryTargets[i], mib(m.Before.RSS), mib(m.After.RSS),
			m.RSSPerWatch/1024, m.HeapPerWatch/1024, m.StackPerWatch/1024, m.GoroutinesPerWatch, ok, m.perWatch()/1024)
	}
	p("")
	p("### Streaming a large LIST")
	p("")
	p("Peak growth over the pre-request baseline (after a GC), sampled every 2 ms inside the proxy process while the")
	p("response streams through it (RSS from /proc/self/statm, heap = bytes in heap objects from runtime/metrics).")
	p("Flat means: the 10× larger response does not need more memory.")
	p("")
	p("| proxy | LIST | response MiB | time | peak RSS growth MiB | peak heap growth MiB |")
	p("|---|---|---|---|---|---|")
	for _, m := range res.ListMemory {
		p("| %s | %s | %.1f | %s | %.2f | %.2f |", m.Target, m.Label, mib(m.Bytes), m.Elapsed.Round(time.Millisecond), mib(m.RSSGrowth), mib(m.HeapGrowth))
	}
	p("")

	if len(res.Profiles) > 0 || hasHeapTop(res) {
		p("## Profiles of kausality-proxy")
		p("")
		p("Recorded after the measurements (profiling costs CPU, so none of the numbers above were taken with it on).")
		p("Files are in `%s`.", relToRepo(res.RunDir))
		p("")
		for _, pr := range res.Profiles {
			p("### CPU: %s", pr.Name)
			p("")
			p("```")
			p("%s", pr.Flat)
			p("```")
			p("")
			p("<details><summary>sorted by cumulative time</summary>")
			p("")
			p("```")
			p("%s", pr.Cum)
			p("```")
			p("")
			p("</details>")
			p("")
			if pr.Allocs != "" {
				p("<details><summary>allocated during those %d requests (alloc_space; divide by %d for per request)</summary>", pr.Requests, pr.Requests)
				p("")
				p("```")
				p("%s", pr.Allocs)
				p("```")
				p("")
				p("</details>")
				p("")
			}
		}
		for i, m := range res.WatchMemory {
			if m.HeapProfileTop == "" {
				continue
			}
			p("### Heap in use with %d open watches (%s)", m.Watches, res.WatchMemoryTargets[i])
			p("")
			p("```")
			p("%s", m.HeapProfileTop)
			p("```")
			p("")
		}
	}

	renderScaleSection(&b, res.ScaleDoc)

	if len(res.Micro) > 0 {
		p("## Micro-benchmarks")
		p("")
		p("`go test -run '^$' -bench . -benchmem` (see the Makefile's `bench` target for packages and `-benchtime`), median of")
		p("the counts run. `make bench-compare` compares a fresh run with `internal/bench/baseline.txt` using benchstat.")
		p("")
		p("| package | benchmark | ns/op | B/op | allocs/op | other |")
		p("|---|---|---|---|---|---|")
		for _, m := range res.Micro {
			var other []string
			for _, u := range m.Units {
				switch u {
				case "ns/op", "B/op", "allocs/op":
				default:
					other = append(other, fmt.Sprintf("%g %s", m.Metrics[u], u))
				}
			}
			p("| %s | %s | %s | %s | %s | %s |", strings.TrimPrefix(m.Pkg, "github.com/kausality-io/kausality-proxy/"), m.Name,
				fmtNum(m.Metrics["ns/op"]), fmtNum(m.Metrics["B/op"]), fmtNum(m.Metrics["allocs/op"]), strings.Join(other, ", "))
		}
		p("")
	}

	p("## Method")
	p("")
	p("- Machine: %s; `nproc` %d; %s memory; %s. The machine is shared with other work; load average %s at the start, %s at the end.",
		res.Machine.CPU, res.Machine.NProc, res.Machine.Memory, res.Machine.Kernel, res.LoadStart, res.LoadEnd)
	p("- Versions: %s; kube-apiserver %s; etcd %s; kausality-proxy commit %s; modules: %s.",
		res.Machine.GoVersion, res.K8sVersion, res.EtcdVersion, res.Machine.Commit, modules(res.Machine.Modules))
	p("- Command: `%s` (runs the micro-benchmarks into `bin/bench/micro.txt`, builds `./internal/bench` and runs it with `-micro` pointing there). Raw results, logs of both proxies and the pprof files: `%s/`.", res.Command, relToRepo(res.RunDir))
	p("- Control plane: `internal/testenv` (envtest) starts etcd and kube-apiserver from `./bin` on loopback. No kube-controller-manager runs: nothing reconciles the fixtures.")
	p("- Client: one Go process, the same client certificate (user `bench-admin`, group `system:masters`) for all three targets, HTTP/2 with keep-alive (client-go's transport), bodies read to the last byte; responses are not decoded while timed. The bearer-token row uses a service-account token: kausality-proxy reviews it once (TokenReview, cached) and passes it through.")
	p("- kausality-proxy runs in a child process exactly as `e2e/framework/local.go` runs it (`proxy.Options` → `Config` → `Complete` → `New` → `Run`), with its own client-certificate identity (`system:masters`), the default mode `log`, JSON decision logs at info level to a file, and a `--config` that excludes the namespace `%s` (pass-through rows).", nsPass)
	p("- The bare proxy is a child process too: `net/http` TLS server (HTTP/2, client certificates verified against the same CA) → `httputil.ReverseProxy` (`FlushInterval: -1`) → client-go HTTP/2 transport with its own client certificate; upgrade requests go out over HTTP/1.1.")
	p("- Upstream requests of kausality-proxy are counted at its two transports: `Options.WrapUpstreamTransport` (forwarded requests) and `rest.Config.WrapTransport` of its upstream config (its own clients, recognised by their User-Agent `kausality-proxy`: informers, live GETs, reviews, side writes). %s", backgroundLine(res.Background, res.Duration))
	p("- Writes go to ReplicaSets owned (controller: true) by Deployments whose status was written by the field manager `%s`, which the proxy therefore identifies as their controller. UPDATE and PATCH rotate over %d objects per target so that the proxy's informer has seen an object's previous write before the next one; every write sets a new `spec.minReadySeconds`, i.e. changes the desired state. CREATE makes a new ReplicaSet each time. The apply configuration carries the controller reference, as a controller's does.", fmController, poolSize)
	p("- Allowance rows: the namespace `%s` has `kausality.io/allowance-mode: enforce` and the shipped AllowancePolicies (`%s`) are in force; its Deployment's pod template was changed by a person through kausality-proxy, so it carries the allowances of a rollout (ReplicaSet create, delete, spec.replicas, spec.minReadySeconds), and nothing reconciles it. Before the rows run, a write of a ReplicaSet's pod template, which no allowance covers, is checked to be refused.", nsAllowances, shippedAllowancePolicies)
	p("- Sizes: GET %d iterations, LIST %d (of %d objects), large LIST %d, writes %d per row, upgrade %d, warm-up %d per row (GET %d, writes %d: each rotated object is written once through every target before a row is measured, so another actor's first write of an object, which reads it live once, is left out of the steady state); WATCH %d watchers per column × %d events; %d open watches; load: GET %d in flight, writes 4 in flight, %d rounds.",
		res.Config.GetN, res.Config.ListN, res.Config.ListObjects, res.Config.BigListN, res.Config.WriteN, res.Config.UpgradeN, res.Config.Warmup, res.Config.Warmup*4, max(res.Config.Warmup, poolSize),
		res.Config.Watchers, res.Config.WatchEvents, res.Config.OpenWatches, res.Config.LoadConcurrency, res.Config.LoadRounds)
	p("- Goals: reads p50 ratio ≤ %.2f and p99 ratio ≤ %.2f against the bare proxy (any proxy's floor is above direct); intercepted writes with a cached parent add ≤ %.0f ms p50 over direct and make no extra upstream round trip; memory O(1) per streamed response and < 50 KiB per open watch. They are reported here, never asserted by tests.",
		goalReadP50, goalReadP99, goalWriteAddedP50Ms)
	return b.String()
}

func writeVerdicts(b *strings.Builder, res *Results) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	met, judged := 0, 0
	var missed []string
	for _, r := range res.Rows {
		if r.Kind == goalNone {
			continue
		}
		judged++
		ok, v := r.verdict()
		if ok {
			met++
			continue
		}
		k, d, br := r.S[kausality], r.S[direct], r.S[bare]
		line := fmt.Sprintf("%s — %s: %s. kausality÷direct %s / %s, kausality÷bare %s / %s (p50 / p99), %+.2f ms p50 over direct, %+.2f ms over bare",
			shortSection(r.Section), r.Name, v, f2(ratio(k.P50, d.P50)), f2(ratio(k.P99, d.P99)), f2(ratio(k.P50, br.P50)), f2(ratio(k.P99, br.P99)),
			k.P50-d.P50, k.P50-br.P50)
		if u := r.Upstream.String(); u != "" {
			line += "; upstream per call: " + u
		}
		missed = append(missed, line)
	}
	p("- %d of %d rows with a goal meet it.", met, judged)
	for _, m := range missed {
		p("- Missed: %s.", m)
	}
	for i, m := range res.WatchMemory {
		ok := "✅"
		if m.perWatch() >= goalWatchBytes {
			ok = "❌"
		}
		p("- %s %s: %.1f KiB per open watch (RSS %.1f KiB, Go heap + stacks %.1f KiB; goal < 50 KiB).",
			ok, res.WatchMemoryTargets[i], m.perWatch()/1024, m.RSSPerWatch/1024, (m.HeapPerWatch+m.StackPerWatch)/1024)
	}
	for _, t := range []string{"bare", "kausality"} {
		var small, large *ListMemory
		for i := range res.ListMemory {
			m := &res.ListMemory[i]
			if m.Target != t {
				continue
			}
			if small == nil {
				small = m
			} else {
				large = m
			}
		}
		if small != nil && large != nil {
			p("- %s streaming a LIST: peak growth %.2f MiB RSS / %.2f MiB heap for %.0f MiB, %.2f MiB RSS / %.2f MiB heap for %.0f MiB.",
				t, mib(small.RSSGrowth), mib(small.HeapGrowth), mib(small.Bytes), mib(large.RSSGrowth), mib(large.HeapGrowth), mib(large.Bytes))
		}
	}
	for _, l := range res.Loads {
		p("- CPU per 1,000 requests, %s: bare %s ms, kausality %s ms.", l.Name, f0(l.CPUPer1000(bare)), f0(l.CPUPer1000(kausality)))
	}
}

// perWatch is the larger of the RSS growth and the Go heap + stack growth
// per watch: RSS alone can hide growth into pages that were resident
// already.
func (m WatchMemory) perWatch() float64 {
	return max(m.RSSPerWatch, m.HeapPerWatch+m.StackPerWatch)
}

func shortSection(s string) string {
	if i := strings.Index(s, "("); i > 0 && strings.HasSuffix(s, ")") {
		return s[i+1 : len(s)-1]
	}
	if i := strings.Index(s, " ("); i > 0 {
		return s[:i]
	}
	return s
}

func hasHeapTop(res *Results) bool {
	for _, m := range res.WatchMemory {
		if m.HeapProfileTop != "" {
			return true
		}
	}
	return false
}

func modules(m map[string]string) string {
	var parts []string
	for _, k := range []string{"k8s.io/apiserver", "k8s.io/client-go", "sigs.k8s.io/controller-runtime", "golang.org/x/net"} {
		if v, ok := m[k]; ok {
			parts = append(parts, k+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func relToRepo(path string) string {
	root, err := os.Getwd()
	if err == nil {
		if rel, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return path
}
