package reliability

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
)

// IssuesHeading starts the section of docs/reliability.md that people
// write: Render keeps it as it finds it.
const IssuesHeading = "## Issues found and fixed"

// defaultIssues is the section when the document has none yet.
const defaultIssues = IssuesHeading +
	"\n" +
	"\n" +
	"- A replica that forwarded a controller's status write (and so knew its\n" +
	"  parent had settled) could still let the controller's next drift through\n" +
	"  as `Expected`: its informer, a beat behind, then delivered the parent as\n" +
	"  it was before its last spec change, and the settle memory took that late\n" +
	"  sighting of an older spec as news, forgetting the settlement. The\n" +
	"  hardening load caught it (a drift write accepted in enforce mode).\n" +
	"  `intercept/settle` now ignores sightings of an older spec than the newest\n" +
	"  generation it has seen (`TestLateSightingOfAnOlderSpecKeepsTheSettlement`).\n" +
	"- An answer to a write that broke off half-way (kube-apiserver killed while\n" +
	"  answering) reached the caller as a reset HTTP/2 stream, with no Status.\n" +
	"  The proxy now reads a write's answer whole before passing it on, and\n" +
	"  answers a broken one with a 502 Status saying the write may have been\n" +
	"  applied (`proxy/writeanswer.go`, `TestBrokenWriteAnswerBecomesAStatus`);\n" +
	"  the load asserts that no write goes unanswered except through a killed\n" +
	"  replica.\n" +
	"- /readyz reported a (re)started replica ready before its approval-policy\n" +
	"  caches had synced; until they had, it denied drift that an\n" +
	"  ApprovalPolicy approves while its peers allowed it. /readyz now also\n" +
	"  waits for those caches, or for kube-apiserver to say the policy kinds\n" +
	"  are not installed (`TestReadyOnlyOncePolicyCachesSynced`,\n" +
	"  `TestReadyWithoutPolicyCRDs`).\n" +
	"- Checked, nothing to fix: the serving port already has k8s.io/apiserver's\n" +
	"  32s read-header timeout, 1 MiB header limit and 90s idle timeout\n" +
	"  (`TestServingRefusesOversizedHeaders`; the slow-client suite shows them at\n" +
	"  work).\n" +
	"- (to be filled in)\n"

// Input is what Render combines.
type Input struct {
	Figures *Figures
	Fuzz    []FuzzTarget
	// Command is what produced the figures, e.g. "make test-hardening".
	Command string
	// Previous is the document as it was (may be empty): its "Issues
	// found and fixed" section is kept.
	Previous []byte
}

// Render writes docs/reliability.md.
func Render(in Input) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	f := in.Figures

	p("# Reliability\n\n")
	p("How kausality-proxy behaves under load, faults and hostile clients, measured by\n")
	p("`%s` against a real local control plane (etcd and kube-apiserver, as\n", in.Command)
	p("`make test`), with two replicas of the real binary. This file is written by\n")
	p("that command (`internal/reliability`) from the figures of its last run;\n")
	p("only the section \"Issues found and fixed\" is kept as written.\n\n")
	p("Machine of the last run: %d CPUs, %s/%s; the hardening suite took %.0fs.\n",
		f.Machine.CPUs, f.Machine.GOOS, f.Machine.GOARCH, f.SuiteSeconds)
	p("Latencies and CPU times are from a shared machine: compare them within one run, not across runs.\n\n")

	p("## How to run\n\n")
	p("```sh\nmake test-hardening\n```\n\n")
	p("It runs `make fuzz` (every fuzz target for a fixed number of executions,\n")
	p("about 30s each on 2 cores; `FUZZTIME` overrides the budgets), then\n")
	p("the hardening suite (`go test -tags hardening ./e2e/hardening/`, which builds\n")
	p("the binary itself and needs the control-plane binaries of `make testbin`),\n")
	p("then writes this file. The suite's files carry the `hardening` build tag, so\n")
	p("`make test` does not run it. `.ci/run` runs it after `make test`.\n\n")

	renderLoad(&b, f.Load)
	renderFaults(&b, f.Faults)
	renderSlow(&b, f.SlowClients)
	renderFuzz(&b, in.Fuzz)

	p("%s\n", strings.TrimRight(issuesSection(in.Previous), "\n"))
	return b.Bytes()
}

const notMeasured = "Not measured in the last run.\n\n"

const faultsIntro = `Injected one after another, a few seconds apart, while the load runs. The
ledger check above covers the writes in flight during each. A canary parent
checks that a replica's parent cache resumes after its watches broke: its spec
changes and the replica sees it, the fault breaks the replica's watches, its
controller reports it settled through the other replica, and the canary's next
drift through the replica must become a denial, which only a resumed (or
re-listed) cache can bring about.

`

const slowClientsIntro = `Attacks on one replica; meanwhile an administrator sends GETs, each on a new
TLS connection (so each needs the replica to accept and handshake). Every GET
must succeed; latencies are reported, not asserted. The serving port is
k8s.io/apiserver's: a 32s read-header timeout (which also bounds the TLS
handshake), 1 MiB of request headers (431 beyond), a 90s idle timeout, and
HTTP/2's 10s for a client's preface.

`

const fuzzIntro = "Each target runs for its execution budget (a count, so that the run's end\n" +
	"is never mistaken for a failure); crashers would land in the package's\n" +
	"`testdata/fuzz` and fail the run.\n\n"

// section writes a section's heading and what it measures. When the last
// run brought no figures for it, it writes absent instead of the figures
// and reports false, so that every section says why it is empty.
func section(b *bytes.Buffer, heading, intro string, hasFigures bool, absent string) bool {
	b.WriteString(heading)
	b.WriteString(intro)
	if !hasFigures {
		b.WriteString(absent)
	}
	return hasFigures
}

func renderLoad(b *bytes.Buffer, l *Load) {
	if !section(b, "## Load (`TestLoadAndFaults`)\n\n", "", l != nil, notMeasured) {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("%d controller identities (client certificates from the control plane's client CA,\n", l.Controllers)
	p("each allowed only its own namespace) write through %d replicas in turn while\n", l.Replicas)
	p("%d watches stay open through them. Each controller owns a parent (a `Rig` with a\n", l.Watches)
	p("status it writes through the proxy, so the proxy knows its controller) and runs\n")
	p("rounds: a person changes the parent's spec; the controller creates a child\n")
	p("(`Tally`) and updates it three times (expected: allowed), reports the parent\n")
	p("settled, drifts twice (enforce mode: denied with a 403 Status), gets a `once`\n")
	p("approval and makes the one write it admits, and drifts again (denied). Every\n")
	p("write carries a unique marker and increments a counter with a resourceVersion\n")
	p("precondition; a ledger records each answer. Afterwards every child is read\n")
	p("straight from kube-apiserver and held against the ledger: an accepted write must\n")
	p("be in etcd exactly once, a refused one not at all, a write without an answer\n")
	p("(or with a 5xx) at most once; the counter must equal the number of markers; the\n")
	p("trace's last hop must name the child's current generation (no trace without its\n")
	p("spec change); a once approval must be gone exactly when its write was applied.\n")
	p("The faults below are injected into the second half of the same load.\n\n")
	p("| figure | value |\n|---|---|\n")
	p("| rounds (all controllers) | %d in %.0fs |\n", l.Rounds, l.Seconds)
	p("| requests sent through the proxies | %d (%d writes, dry runs included) |\n", l.Requests, l.WriteRequests)
	p("| writes verified against etcd | %d |\n", l.VerifiedWrites)
	p("| accepted writes lost / applied twice / refused but applied | %d / %d / %d |\n", l.Lost, l.Duplicated, l.RefusedButApplied)
	p("| writes answered 5xx or not at all: applied / not applied | %d / %d |\n", l.UncertainApplied, l.UncertainNotApplied)
	p("| children created / traces checked | %d / %d |\n", l.TalliesCreated, l.TracesChecked)
	p("| once approvals consumed / spent by a write that was not applied: replica alive / replica killed (both must be 0) | %d / %d / %d |\n",
		l.ApprovalsConsumed, l.ApprovalsSpentByFailedWrites, l.ApprovalsLostWithReplica)
	p("| watches held / events received / re-watches / re-lists | %d / %d / %d / %d |\n", l.Watches, l.WatchEvents, l.WatchRewatches, l.WatchRelists)
	p("| memory per open watch | %.1f KiB (RSS of both replicas: %d KiB before the watches, %d KiB with them) |\n",
		l.MemoryPerWatchKiB, l.RSSBeforeWatchesKiB, l.RSSAfterWatchesKiB)
	p("| proxy CPU per write | %.2f ms (%.1fs user+system CPU of both replicas over the fault-free phase / %d write requests in it; reads and watch traffic ride along) |\n",
		l.CPUPerWriteMs, l.CPUSeconds, l.CPUPhaseWrites)
	p("\n")
	if len(l.Outcomes) > 0 {
		p("Writes by role and outcome (accepted: 2xx; denied: the proxy's drift 403; refused: another 4xx;\n")
		p("failed: 5xx; broken: no answer):\n\n")
		p("| role | outcome | writes |\n|---|---|---|\n")
		for _, o := range l.Outcomes {
			p("| %s | %s | %d |\n", o.Kind, o.Outcome, o.Count)
		}
		p("\n")
	}
}

func renderFaults(b *bytes.Buffer, faults []Fault) {
	if !section(b, "## Faults (`TestLoadAndFaults`, second half)\n\n", faultsIntro, len(faults) > 0, "None injected in the last run.\n\n") {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("| fault | what | recovery | writes answered meanwhile |\n|---|---|---|---|\n")
	for _, f := range faults {
		what := f.What
		if f.Notes != "" {
			what += "; " + f.Notes
		}
		p("| %s | %s | %.1fs: %s | %s |\n", f.Name, what, f.RecoverySeconds, f.Recovery, outcomeList(f.Outcomes))
	}
	p("\n")
}

func outcomeList(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func renderSlow(b *bytes.Buffer, attacks []Attack) {
	if !section(b, "## Slow clients (`TestSlowClients`)\n\n", slowClientsIntro, len(attacks) > 0, notMeasured) {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("| attack | admin GETs (failed) | p50 / p99 before | p50 / p99 during | what the replica did |\n|---|---|---|---|---|\n")
	for _, a := range attacks {
		p("| %s: %s | %d (%d) | %.1f / %.1f ms | %.1f / %.1f ms | %s |\n",
			a.Name, a.What, a.AdminGETs, a.Failed, a.BaselineP50Ms, a.BaselineP99Ms, a.P50Ms, a.P99Ms, a.Notes)
	}
	p("\n")
}

func renderFuzz(b *bytes.Buffer, targets []FuzzTarget) {
	if !section(b, "## Fuzzing (`make fuzz`)\n\n", fuzzIntro, len(targets) > 0, "Not run in the last run.\n\n") {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("| package | target | budget | time | executions |\n|---|---|---|---|---|\n")
	var total int64
	for _, t := range targets {
		p("| `%s` | `%s` | %s | %s | %d |\n", t.Package, t.Name, t.Budget, t.Elapsed, t.Execs)
		total += t.Execs
	}
	p("| | total | | | %d |\n\n", total)
}

// issuesSection returns the "Issues found and fixed" section of the
// previous document (up to the next "## " heading), or the default.
func issuesSection(previous []byte) string {
	s := string(previous)
	i := strings.Index(s, IssuesHeading)
	if i < 0 {
		return defaultIssues
	}
	rest := s[i+len(IssuesHeading):]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j+1]
	}
	return IssuesHeading + rest
}
