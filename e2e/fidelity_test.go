package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// fidelityDoc is where TestWorkloadFidelity writes its figures, relative
// to this package's directory (go test's working directory).
var fidelityDoc = filepath.Join("..", "docs", "fidelity.md")

// gatedConfig gates every child kind: a controller re-creating a pod a
// person deleted under a settled parent is drift, as for any other child.
const gatedConfig = framework.BaseConfig + "ungatedChildKinds: []\n"

// The built-in workloads, each through its life cycle under
// kube-controller-manager through the proxy in enforce mode: no false
// denial, and every drift injected after the workload settled caught.
// The figures go to docs/fidelity.md.
//
// The scenarios run in parallel (most of their time is spent waiting for
// controllers), in two phases: first under the default config (Pods and
// Jobs traced, not gated), then, for the kinds whose controllers re-create
// pods, under ungatedChildKinds: []. The config is the proxy's, shared by
// every namespace, so the second phase starts only when the first has
// ended.
func TestWorkloadFidelity(t *testing.T) {
	start := time.Now()
	aliceCfg, err := cluster.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "alice")
	bobCfg, err := cluster.UserThroughProxy("bob", "system:masters")
	mustf(t, err, "bob")
	nodes := fakeNodes(t, 2)

	workloads := []*workload{
		{kind: "Deployment", run: runDeployment, plannedDrifts: 1},
		{kind: "StatefulSet", run: runStatefulSet, gatedDrift: statefulSetPodDeleted, plannedDrifts: 1},
		{kind: "DaemonSet", run: runDaemonSet(nodes), gatedDrift: daemonSetPodDeleted(nodes), plannedDrifts: 1},
		{kind: "Job", run: runJob},
		{kind: "CronJob", run: runCronJob},
		{kind: "Deployment, revisionHistoryLimit 1", slug: "deploy-history", run: runDeploymentHistory, plannedDrifts: 1},
		{kind: "StatefulSet, revisionHistoryLimit 1", slug: "sts-history", run: runStatefulSetHistory},
		{kind: "DaemonSet, revisionHistoryLimit 1", slug: "ds-history", run: runDaemonSetHistory(nodes)},
	}
	for _, w := range workloads {
		// The namespaces outlive the phases: the second one continues
		// where the first left the workload.
		slug := w.slug
		if slug == "" {
			slug = strings.ToLower(w.kind)
		}
		w.ns = namespaceWithMode(t, "fidelity-"+slug, "enforce")
		w.alice, w.aliceCfg, w.bob = clientFor(t, aliceCfg), aliceCfg, clientFor(t, bobCfg)
		w.admin = directClient(t)
		readyPods(t, w.ns)
	}

	t.Run("default-config", func(t *testing.T) {
		for _, w := range workloads {
			t.Run(w.kind, func(t *testing.T) {
				t.Parallel()
				t.Cleanup(func() {
					if t.Failed() {
						w.logDenials(t)
					}
				})
				w.run(t, w)
			})
		}
	})
	t.Run("pods-and-jobs-gated", func(t *testing.T) {
		setConfig(t, gatedConfig)
		for _, w := range workloads {
			if w.gatedDrift == nil {
				continue
			}
			t.Run(w.kind, func(t *testing.T) {
				t.Parallel()
				t.Cleanup(func() {
					if t.Failed() {
						w.logDenials(t)
					}
				})
				if !w.settled {
					t.Fatalf("%s did not settle under the default config; the drift cannot be injected", w.kind)
				}
				w.gatedDrift(t, w)
				w.requireNoFalseDenials(t, "pods gated")
			})
		}
	})

	all, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	rows := make([]fidelityRow, 0, len(workloads))
	for _, w := range workloads {
		row := fidelityFigures(w, all)
		rows = append(rows, row)
		if len(row.falseDenials) > 0 {
			t.Errorf("%s: %d false denials:\n%s", w.kind, len(row.falseDenials), formatLines(row.falseDenials))
		}
		if len(w.drifts) != w.plannedDrifts || row.caught != len(w.drifts) {
			t.Errorf("%s: %d drifts planned, %d injected, %d caught", w.kind, w.plannedDrifts, len(w.drifts), row.caught)
		}
	}
	doc := renderFidelity(rows, start, time.Since(start))
	t.Logf("fidelity figures:\n%s", doc)
	// Only a complete, passing run on the local provider (the one `make
	// test` runs) replaces the document.
	if _, local := cluster.(*framework.Local); local && !t.Failed() {
		mustf(t, os.WriteFile(fidelityDoc, []byte(doc), 0o644), "writing %s", fidelityDoc)
	}
}

// fidelityRow is one workload's figures.
type fidelityRow struct {
	kind  string
	steps []string
	// controllerWrites counts decision lines by kube-controller-manager's
	// service accounts, personWrites the others.
	controllerWrites, personWrites int
	// byController counts the controllers' decisions per outcome
	// ("Allow Expected", "Deny DriftUnapproved", ...).
	byController map[string]map[string]int
	falseDenials []framework.DecisionLine
	// injected and caught count drifts; driftDenials the Deny lines they
	// account for (the controller's first attempt and its retries).
	injected, caught, driftDenials int
}

func fidelityFigures(w *workload, all []framework.DecisionLine) fidelityRow {
	row := fidelityRow{kind: w.kind, steps: w.steps, byController: map[string]map[string]int{}, injected: len(w.drifts)}
	row.falseDenials = w.falseDenials(all)
	for i, l := range all {
		if l.Str("namespace") != w.ns {
			continue
		}
		user := l.Str("user")
		if !strings.HasPrefix(user, kcmServiceAccountPrefix) {
			row.personWrites++
			continue
		}
		row.controllerWrites++
		name := strings.TrimPrefix(user, kcmServiceAccountPrefix)
		if row.byController[name] == nil {
			row.byController[name] = map[string]int{}
		}
		row.byController[name][strings.TrimSpace(l.Str("decision")+" "+l.Str("category"))]++
		if l.Str("decision") != "Deny" {
			continue
		}
		for _, d := range w.drifts {
			if d.covers(i, l) {
				row.driftDenials++
				break
			}
		}
	}
	for _, d := range w.drifts {
		if d.caught {
			row.caught++
		}
	}
	return row
}

func renderFidelity(rows []fidelityRow, start time.Time, took time.Duration) string {
	var b strings.Builder
	b.WriteString(`# Fidelity: the built-in workload controllers through kausality-proxy

<!-- Generated by ` + "`make test`" + ` (e2e/fidelity_test.go, TestWorkloadFidelity). Do not edit: rerun ` + "`make test`" + `. -->

`)
	fmt.Fprintf(&b, "Measured %s on a real local control plane (etcd, kube-apiserver and kube-controller-manager from `./bin`), in one run of %s.\n\n",
		start.UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
	b.WriteString(`kube-controller-manager runs every default controller through the proxy, each with its own service account
(` + "`--use-service-account-credentials`" + `). Each workload lives in its own namespace in **enforce** mode, so a write
the proxy judges to be drift is denied. A person (a client-certificate user through the proxy) creates and changes
the workloads; the controllers do the rest. There is no kubelet and no scheduler: the test marks pods Running and Ready
(pods of Jobs Succeeded) and keeps two fake nodes Ready, as a kubelet would.

What the figures mean:

- **Controller writes decided**: decision lines in the workload's namespace whose user is a kube-controller-manager
  service account: every create, update, patch and delete a controller sent while the workload went through its life
  cycle (rollouts, scaling, undo, self-healing, completion), including the retries of a denied write.
- **False denials**: Deny lines in the namespace that are not a controller reverting a drift the test injected.
  Each one would have stopped a legitimate controller action on a real cluster. The test fails unless this is 0.
- **Injected drifts**: after the workload settled, a person changed one of its children behind the controller's
  back (scaled a ReplicaSet; deleted a pod while Pods are gated with ` + "`ungatedChildKinds: []`" + `).
- **Drifts caught**: the controller's revert of an injected drift was denied (Deny, DriftUnapproved) and the
  person's change still stood 15 s later. The test fails unless every injected drift is caught.
- **Denied reverts**: the Deny lines of the injected drifts: the controller's first attempt and its retries.

Jobs and CronJobs have no revert behaviour to test (the Job controller does not re-create the pods of a finished
Job, the CronJob controller does not undo a change to a Job it started), so no drift is injected for them.

`)
	b.WriteString("| Workload | Controller writes decided | Person writes decided | False denials | Injected drifts | Drifts caught | Denied reverts |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	var total fidelityRow
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d |\n", r.kind, r.controllerWrites, r.personWrites, len(r.falseDenials), r.injected, r.caught, r.driftDenials)
		total.controllerWrites += r.controllerWrites
		total.personWrites += r.personWrites
		total.falseDenials = append(total.falseDenials, r.falseDenials...)
		total.injected += r.injected
		total.caught += r.caught
		total.driftDenials += r.driftDenials
	}
	fmt.Fprintf(&b, "| **Total** | **%d** | **%d** | **%d** | **%d** | **%d** | **%d** |\n",
		total.controllerWrites, total.personWrites, len(total.falseDenials), total.injected, total.caught, total.driftDenials)

	for _, r := range rows {
		fmt.Fprintf(&b, "\n## %s\n\n", r.kind)
		for i, s := range r.steps {
			fmt.Fprintf(&b, "%d. %s\n", i+1, s)
		}
		b.WriteString("\n| Controller | Writes decided | Decisions |\n|---|---:|---|\n")
		for _, name := range sortedKeys(r.byController) {
			counts := r.byController[name]
			n := 0
			var parts []string
			for _, outcome := range sortedKeys(counts) {
				n += counts[outcome]
				parts = append(parts, fmt.Sprintf("%s %d", outcome, counts[outcome]))
			}
			fmt.Fprintf(&b, "| %s | %d | %s |\n", name, n, strings.Join(parts, ", "))
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
