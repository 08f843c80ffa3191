// Command bench measures what kausality-proxy costs compared with talking
// to kube-apiserver directly, on a real local control plane (etcd and
// kube-apiserver from ./bin, started by internal/testenv), and writes
// docs/performance.md from what it measured. `make bench` runs it.
//
// Every operation runs against three targets, interleaved in one run:
// kube-apiserver directly, a bare httputil.ReverseProxy (TLS in, HTTP/2
// out, no logic: the floor of any proxy) and kausality-proxy. Both proxies
// run as child processes of this program (it re-executes itself with the
// "child" argument), so their CPU time and memory are measured alone; a
// loopback control port in each child reports getrusage, memory, its
// upstream requests (counted at the transport) and pprof profiles.
//
// Nothing here asserts a time: the numbers are reported, and judged
// against the goals in the generated document.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "child" {
		if err := runChild(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	var (
		out     = flag.String("out", filepath.Join(root, "docs", "performance.md"), "Markdown report to write (empty: none).")
		micro   = flag.String("micro", "", "Output of `go test -bench -benchmem` to include in the report.")
		workDir = flag.String("work-dir", filepath.Join(root, "bin", "bench"), "Where logs, profiles and raw results go.")
		quick   = flag.Bool("quick", false, "Tiny sizes, for checking the harness itself; the numbers mean nothing.")
		profile = flag.Bool("profile", true, "Record and report CPU and heap profiles of kausality-proxy.")
		command = flag.String("command", "make bench", "How this run was started, for the report.")
		scale   = flag.Int("scale", 0, "Run the scale profile instead, with this many parents (and ten times as many children), and write -out.")
		runs    = flag.Int("runs", 1, "With -scale: how many times to run the profile, each on a fresh control plane; the report shows every run's figures. With -only: how many times to measure the section.")
		cpuN    = flag.Int("cpu-per-write", 0, "Measure only CPU per intercepted and pass-through write, with this many writes per round and target (three rounds), and profile them; writes no report.")
		only    = flag.String("only", "", `Measure one section only and write no report, -runs times: "drift" (the drift scenario's rows) or "expected" (the Expected writes' rows).`)
	)
	flag.Parse()
	rc := newRunConfig(*quick)
	rc.Profile = *profile
	if *cpuN > 0 {
		return runCPUPerWrite(*cpuN, 3, *workDir, rc)
	}
	switch *only {
	case "":
	case "drift":
		return runOnly(scDrift, max(*runs, 1), *workDir, rc)
	case "expected":
		return runOnly(scExpected, max(*runs, 1), *workDir, rc)
	default:
		return fmt.Errorf("-only %q: the sections that run alone are drift and expected", *only)
	}
	if *scale > 0 {
		return runScale(root, *scale, max(*runs, 1), *out, *workDir, *command, rc)
	}
	return runAll(root, rc, *out, *micro, *workDir, *quick, *command)
}

// runAll is `make bench`: every row, written to out.
//
//nolint:funlen // the run of the scenarios, one after the other, a command's main
func runAll(root string, rc RunConfig, out, micro, workDir string, quick bool, command string) error {

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	runDir := filepath.Join(workDir, "run-"+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	logf("work dir %s", runDir)

	res := &Results{Started: time.Now(), Config: rc, Command: command, Quick: quick, RunDir: runDir}
	res.Machine = describeMachine(root)
	res.LoadStart = loadAvg()

	start := time.Now()
	h, err := startHarness(ctx, rc, runDir)
	if err != nil {
		return err
	}
	defer h.Stop()
	res.K8sVersion = h.K8sVersion
	res.EtcdVersion = etcdVersion(h.cp.BinDir)
	logf("control plane (%s) and proxies up in %s", h.K8sVersion, time.Since(start).Round(time.Millisecond))
	if err := h.setupFixtures(ctx); err != nil {
		return fmt.Errorf("fixtures: %w", err)
	}

	if res.Rows, err = h.reads(ctx); err != nil {
		return err
	}
	w, err := h.watchLatency(ctx)
	if err != nil {
		return err
	}
	res.Rows = append(res.Rows, w)
	writes, pools, err := h.writes(ctx)
	if err != nil {
		return err
	}
	res.Rows = append(res.Rows, writes...)
	up, err := h.upgrade(ctx)
	if err != nil {
		return err
	}
	res.Rows = append(res.Rows, up)
	if res.Loads, err = h.loads(ctx, pools); err != nil {
		return err
	}
	if res.ListMemory, err = h.listMemory(ctx); err != nil {
		return err
	}
	for _, t := range h.proxies() {
		heap := ""
		if rc.Profile && t.idx == kausality {
			heap = filepath.Join(runDir, "heap-watches.pprof")
		}
		m, err := h.openWatchesMemory(ctx, t, rc.OpenWatches, heap)
		if err != nil {
			return err
		}
		if heap != "" {
			m.HeapProfileTop = pprofTop(heap, false, "inuse_space")
		}
		res.WatchMemory = append(res.WatchMemory, m)
		res.WatchMemoryTargets = append(res.WatchMemoryTargets, t.name)
	}
	if rc.Profile {
		if res.Profiles, err = h.profiles(ctx, runDir, pools); err != nil {
			return err
		}
	}
	res.Duration = time.Since(start)
	res.LoadEnd = loadAvg()
	if end, err := h.targets[kausality].ctl.Stats(ctx); err == nil {
		res.Background = end.Background
	}

	if micro != "" {
		f, err := os.Open(micro)
		if err != nil {
			return err
		}
		res.Micro = parseMicro(f)
		f.Close()
		res.MicroFile = micro
	}
	if doc, err := os.ReadFile(filepath.Join(root, scaleDoc)); err == nil {
		res.ScaleDoc = string(doc)
	}
	raw, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(runDir, "results.json"), raw, 0o644); err != nil {
		return err
	}
	md := render(res)
	fmt.Println(summaryTable(res))
	if out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			return err
		}
		logf("wrote %s", out)
	}
	return nil
}

// Machine describes where the run happened.
type Machine struct {
	CPU, Kernel, Memory string
	NProc               int
	GoVersion           string
	Commit              string
	Modules             map[string]string
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// runScale runs the scale profile alone and writes its report to out.
func runScale(root string, parents, runs int, out, workDir, command string, rc RunConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	runDir := filepath.Join(workDir, "scale-"+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	logf("work dir %s", runDir)
	started, loadStart := time.Now(), loadAvg()
	var results []*ScaleResult
	for i := range runs {
		dir := filepath.Join(runDir, strconv.Itoa(i+1))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		res, err := scaleRun(ctx, rc, dir, parents)
		if err != nil {
			return err
		}
		raw, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "scale.json"), raw, 0o644); err != nil {
			return err
		}
		results = append(results, res)
	}
	// The hand-written part of the document it replaces is kept.
	var previous []byte
	if out != "" {
		var err error
		if previous, err = os.ReadFile(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	md := renderScale(results, rc, describeMachine(root), command, started, time.Since(started), loadStart, string(previous))
	fmt.Print(md)
	if out == "" {
		return nil
	}
	logf("wrote %s", out)
	return os.WriteFile(out, []byte(md), 0o644)
}

// scaleRun is one run of the scale profile on a control plane of its own.
func scaleRun(ctx context.Context, rc RunConfig, dir string, parents int) (*ScaleResult, error) {
	h, err := startHarness(ctx, rc, dir)
	if err != nil {
		return nil, err
	}
	defer h.Stop()
	return h.scaleProfile(ctx, parents)
}
