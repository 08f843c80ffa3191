package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// fidelityDoc is where TestWorkloadFidelity writes its figures, relative
// to this package's directory (go test's working directory).
var fidelityDoc = filepath.Join("..", "docs", "fidelity.md")

// gatedConfig gates every child kind: a controller re-creating a pod a
// person deleted under a settled parent is drift, as for any other child.
const gatedConfig = framework.BaseConfig + "ungatedChildKinds: []\n"

// The built-in workloads, each through its life cycle under
// kube-controller-manager through the proxy in enforce mode: no false
// denial, and every drift injected after the workload settled caught. On
// the local control plane, also: two in-test operators that report
// readiness without status.observedGeneration, their writes spread over
// two proxy replicas, and every built-in workload again with the shipped
// AllowancePolicies enforced. The figures go to docs/fidelity.md.
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

	builtIn := func() []*fidelityCase {
		return []*fidelityCase{
			{workload: &workload{kind: "Deployment", run: runDeployment, plannedDrifts: 1}},
			{workload: &workload{kind: "StatefulSet", run: runStatefulSet, gatedDrift: statefulSetPodDeleted, plannedDrifts: 1}},
			{workload: &workload{kind: "DaemonSet", run: runDaemonSet(nodes), gatedDrift: daemonSetPodDeleted(nodes), plannedDrifts: 1}},
			{workload: &workload{kind: "Job", run: runJob}},
			{workload: &workload{kind: "CronJob", run: runCronJob}},
			{workload: &workload{kind: "Deployment, revisionHistoryLimit 1", slug: "deploy-history", run: runDeploymentHistory, plannedDrifts: 1}},
			{workload: &workload{kind: "StatefulSet, revisionHistoryLimit 1", slug: "sts-history", run: runStatefulSetHistory}},
			{workload: &workload{kind: "DaemonSet, revisionHistoryLimit 1", slug: "ds-history", run: runDaemonSetHistory(nodes)}},
		}
	}
	cases := builtIn()
	if fidelityOperators != nil {
		cases = append(cases, fidelityOperators()...)
	} else {
		t.Log("the in-test operators, the shipped AllowancePolicies and extra replicas need the local control plane: their sections are left out")
	}
	allowed := map[string]bool{}
	if fidelityAllowancePolicies != nil {
		fidelityAllowancePolicies(t)
		for _, c := range builtIn() {
			c.allowances = true
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		w := c.workload
		w.alice, w.aliceCfg, w.bob = clientFor(t, aliceCfg), aliceCfg, clientFor(t, bobCfg)
		w.admin = directClient(t)
		if c.operator != "" {
			continue // the operator's scenario creates its own namespace
		}
		// The namespaces outlive the phases: the second one continues
		// where the first left the workload.
		slug := w.slug
		if slug == "" {
			slug = strings.ToLower(w.kind)
		}
		if c.allowances {
			slug = "allow-" + slug
		}
		w.ns = namespaceWithMode(t, "fidelity-"+slug, "enforce")
		if c.allowances {
			enforceAllowances(t, w.ns)
			allowed[w.ns] = true
		}
		readyPods(t, w.ns)
	}
	traces := watchAllowances(t, allowed)

	var replicas *replicaRun
	t.Run("default-config", func(t *testing.T) {
		for _, c := range cases {
			w := c.workload
			t.Run(c.name(), func(t *testing.T) {
				t.Parallel()
				t.Cleanup(func() {
					if t.Failed() {
						w.logDenials(t)
					}
				})
				w.run(t, w)
			})
		}
		if fidelityTwoReplicas != nil {
			t.Run("two-replicas", func(t *testing.T) {
				t.Parallel()
				replicas = fidelityTwoReplicas(t)
			})
		}
	})
	t.Run("pods-and-jobs-gated", func(t *testing.T) {
		setConfig(t, gatedConfig)
		for _, c := range cases {
			w := c.workload
			if w.gatedDrift == nil {
				continue
			}
			t.Run(c.name(), func(t *testing.T) {
				t.Parallel()
				t.Cleanup(func() {
					if t.Failed() {
						w.logDenials(t)
					}
				})
				if !w.settled {
					t.Fatalf("%s did not settle under the default config; the drift cannot be injected", c.name())
				}
				w.gatedDrift(t, w)
				w.requireNoFalseDenials(t, "pods gated")
			})
		}
	})

	all, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	rows := make([]fidelityRow, 0, len(cases))
	for _, c := range cases {
		row := fidelityFigures(c, all)
		if c.allowances {
			row.traces = traces.figures(c.ns)
		}
		rows = append(rows, row)
		if len(row.falseDenials) > 0 {
			t.Errorf("%s: %d false denials:\n%s", c.name(), len(row.falseDenials), formatLines(row.falseDenials))
		}
		if len(c.drifts) != c.plannedDrifts || row.caught != len(c.drifts) {
			t.Errorf("%s: %d drifts planned, %d injected, %d caught", c.name(), c.plannedDrifts, len(c.drifts), row.caught)
		}
		if !c.allowances {
			continue
		}
		if len(row.violations) > 0 {
			t.Errorf("%s: %d allowance violations:\n%s\nthe writes of their parents:\n%s", c.name(), len(row.violations),
				formatAllowanceLines(row.violations), formatAllowanceLines(parentWrites(c.ns, row.violations, all)))
		}
		if row.allowanceChecked == 0 || row.traces.seen == 0 {
			t.Errorf("%s: allowances were not in force: %d writes checked, %d allowances seen", c.name(), row.allowanceChecked, row.traces.seen)
		}
		if len(row.traces.incomplete) > 0 {
			t.Errorf("%s: allowances whose trace lacks the initiator or a hop's field:\n  %s", c.name(), strings.Join(row.traces.incomplete, "\n  "))
		}
	}
	if fidelityTwoReplicas != nil {
		checkReplicaRun(t, replicas)
	}
	doc := renderFidelity(rows, replicas, start, time.Since(start))
	t.Logf("fidelity figures:\n%s", doc)
	// Only a complete, passing run on the local provider (the one `make
	// test` runs) replaces the document.
	if _, local := cluster.(*framework.Local); local && !t.Failed() {
		mustf(t, os.WriteFile(fidelityDoc, []byte(doc), 0o644), "writing %s", fidelityDoc)
	}
}

// Set by the local provider's files: the in-test operators' rows, the
// shipped AllowancePolicies and the two-replica run need what only the
// local control plane offers.
var (
	fidelityOperators         func() []*fidelityCase
	fidelityAllowancePolicies func(t *testing.T)
	fidelityTwoReplicas       func(t *testing.T) *replicaRun
)

// fidelityCase is one row: a workload scenario, and how it is run.
type fidelityCase struct {
	*workload
	// operator is the user of the in-test operator that drives the
	// workload ("" when only kube-controller-manager does), widget the
	// name of its cluster-scoped parent, whose status it writes.
	operator, widget string
	// allowances runs it with the shipped AllowancePolicies enforced.
	allowances bool
}

func (c *fidelityCase) name() string {
	if c.allowances {
		return c.kind + ", allowances enforced"
	}
	return c.kind
}

// enforceAllowances turns allowances on in enforce mode for ns.
func enforceAllowances(t *testing.T, ns string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"enforce"}}}`, annotations.AllowanceMode)
	_, err := directClient(t).CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	mustf(t, err, "turning allowances on in %s", ns)
}

// replicaRun is the two-replica run's figures.
type replicaRun struct {
	steps        []string
	replicas     []replicaFigures
	revertsTried int
}

// replicaFigures are one proxy replica's decisions of the operator's
// writes.
type replicaFigures struct {
	name          string
	writes        int
	byOutcome     map[string]int
	falseDenials  []framework.DecisionLine
	revertsDenied int
}

// checkReplicaRun fails the test unless the operator's writes reached
// every replica, none was falsely denied, and each replica denied a
// revert.
func checkReplicaRun(t *testing.T, run *replicaRun) {
	t.Helper()
	if run == nil {
		t.Error("the two-replica run did not finish")
		return
	}
	denied := 0
	for _, r := range run.replicas {
		if len(r.falseDenials) > 0 {
			t.Errorf("%s: %d false denials:\n%s", r.name, len(r.falseDenials), formatLines(r.falseDenials))
		}
		if r.writes == 0 || r.revertsDenied == 0 {
			t.Errorf("%s decided %d of the operator's writes and denied %d reverts; want both above 0", r.name, r.writes, r.revertsDenied)
		}
		denied += r.revertsDenied
	}
	if denied != run.revertsTried {
		t.Errorf("%d reverts tried, %d logged as denied across the replicas", run.revertsTried, denied)
	}
}

// parentWrites are the decision lines of writes to the parents of
// violations: whether, and how, the allowances a violation lacked were
// granted and pruned.
func parentWrites(ns string, violations, all []framework.DecisionLine) []framework.DecisionLine {
	parents := map[string]bool{}
	for _, v := range violations {
		parents[v.Str("parent")] = true
	}
	var out []framework.DecisionLine
	for _, l := range all {
		if l.Str("namespace") != ns {
			continue
		}
		for p := range parents {
			if strings.HasSuffix(p, "/"+l.Str("name")) && strings.Contains(p, " "+kindOfResource(l.Str("resource"))+" ") {
				out = append(out, l)
			}
		}
	}
	return out
}

// kindOfResource is the kind of the workload resources the violations'
// parents can be.
func kindOfResource(resource string) string {
	switch resource {
	case "replicasets":
		return "ReplicaSet"
	case "deployments":
		return "Deployment"
	case "statefulsets":
		return "StatefulSet"
	case "daemonsets":
		return "DaemonSet"
	case "jobs":
		return "Job"
	case "cronjobs":
		return "CronJob"
	}
	return resource
}

func formatAllowanceLines(lines []framework.DecisionLine) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %s %s %s %s/%s%s: %s %s gen=%v observed=%v violations=%v justified=%v granted=%v pruned=%v unfinished=%q\n",
			l.Str("ts"), l.Str("user"), l.Str("verb"), l.Str("resource"), l.Str("name"), subresourceSuffix(l), l.Str("decision"),
			l.Str("category"), l["parentGeneration"], l["parentObservedGeneration"], l["allowanceViolations"], l["allowanceJustified"],
			l["allowanceGranted"], l["allowancePruned"], l.Str("allowanceUnfinished"))
	}
	return b.String()
}

// fidelityRow is one workload's figures.
type fidelityRow struct {
	kind       string
	allowances bool
	steps      []string
	// controllerWrites counts decision lines by kube-controller-manager's
	// service accounts and the in-test operator, personWrites the others.
	controllerWrites, personWrites int
	// byController counts the controllers' decisions per outcome
	// ("Allow Expected", "Deny DriftUnapproved", ...).
	byController map[string]map[string]int
	falseDenials []framework.DecisionLine
	// injected and caught count drifts; driftDenials the Deny lines they
	// account for (the controller's first attempt and its retries).
	injected, caught, driftDenials int
	// allowanceChecked counts the controllers' writes whose line has an
	// allowance mode; justified the mutations an allowance justified;
	// violations the lines with a mutation nothing allowed, other than an
	// injected drift's revert.
	allowanceChecked, justified int
	violations                  []framework.DecisionLine
	traces                      allowanceTraceFigures
}

// isController says whether user is one of the workload's controllers, and
// its name in the report.
func (c *fidelityCase) isController(user string) (string, bool) {
	if c.operator != "" && user == c.operator {
		return strings.TrimPrefix(user, "system:serviceaccount:"+wgControllerNS+":") + " (in-test operator)", true
	}
	if strings.HasPrefix(user, kcmServiceAccountPrefix) {
		return strings.TrimPrefix(user, kcmServiceAccountPrefix), true
	}
	return "", false
}

// fidelityFalseDenials are w's false denials, leaving out dry-run probes:
// the scripted operators send them to wait for the proxy's cache, and
// they forward nothing.
func fidelityFalseDenials(w *workload, all []framework.DecisionLine) []framework.DecisionLine {
	var out []framework.DecisionLine
	for _, l := range w.falseDenials(all) {
		if !l.Bool("dryRun") {
			out = append(out, l)
		}
	}
	return out
}

func fidelityFigures(c *fidelityCase, all []framework.DecisionLine) fidelityRow {
	row := fidelityRow{kind: c.kind, allowances: c.allowances, steps: c.steps, byController: map[string]map[string]int{}, injected: len(c.drifts)}
	row.falseDenials = fidelityFalseDenials(c.workload, all)
	for i, l := range all {
		ours := l.Str("namespace") == c.ns || c.widget != "" && l.Str("resource") == "widgets" && l.Str("name") == c.widget
		if !ours || l.Bool("dryRun") {
			continue
		}
		name, ok := c.isController(l.Str("user"))
		if !ok {
			row.personWrites++
			continue
		}
		row.controllerWrites++
		if row.byController[name] == nil {
			row.byController[name] = map[string]int{}
		}
		row.byController[name][strings.TrimSpace(l.Str("decision")+" "+l.Str("category"))]++
		revert := false
		for _, d := range c.drifts {
			revert = revert || d.covers(i, l)
		}
		if l.Str("allowanceMode") != "" {
			row.allowanceChecked++
			if v, _ := l["allowanceJustified"].([]any); len(v) > 0 {
				row.justified += len(v)
			}
			if v, _ := l["allowanceViolations"].([]any); len(v) > 0 && !revert {
				row.violations = append(row.violations, l)
			}
		}
		if l.Str("decision") == "Deny" && revert {
			row.driftDenials++
		}
	}
	for _, d := range c.drifts {
		if d.caught {
			row.caught++
		}
	}
	return row
}

func renderFidelity(rows []fidelityRow, replicas *replicaRun, start time.Time, took time.Duration) string {
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

Three rows are custom resources driven by an in-test operator that writes through the proxy with its own service
account, as an operator deployed in the cluster would:

- **Widget → Gadget, observedGeneration only in the Ready condition**: the operator reports its progress only as
  ` + "`status.conditions[type=Ready].observedGeneration`" + ` (no ` + "`status.observedGeneration`" + `), as Crossplane-style
  resources and many kubebuilder operators do. After a person's spec change, Ready=True names the previous generation,
  so the operator's update of its child is the change being carried out.
- **Widget → Deployment, only an Available condition (memcached pattern)**: the operator-sdk memcached sample's
  shape: ` + "`Available`" + ` Unknown on the first reconcile, True once its Deployment has the size the spec asks for, and
  no observed generation anywhere. Its Deployment is rolled out by kube-controller-manager, whose writes are counted too.
- **Widget → Deployment, only an Available condition, status patched without a resourceVersion**: the same operator
  writing its status as controller-runtime's ` + "`Status().Patch`" + ` with ` + "`client.MergeFrom`" + ` does, a merge patch
  that names no resourceVersion, with the proxy's default ` + "`--unbound-status-record-delay`" + ` (30s). After each of a
  person's spec changes, the patch of the status it computed before lands first; then it scales its Deployment.

The operators are scripted, not reconciling in a loop: each injected drift's revert is attempted three times, a
second apart. Dry-run probes the test sends as the operator, to wait until the proxy's cache has seen a change, are
left out of every figure.

What the figures mean:

- **Controller writes decided**: decision lines in the workload's namespace whose user is a kube-controller-manager
  service account or the in-test operator: every create, update, patch and delete a controller sent while the workload
  went through its life cycle (rollouts, scaling, undo, self-healing, completion), including the retries of a denied
  write.
- **False denials**: Deny lines in the namespace that are not a controller reverting a drift the test injected.
  Each one would have stopped a legitimate controller action on a real cluster. The test fails unless this is 0.
- **Injected drifts**: after the workload settled, a person changed one of its children behind the controller's
  back (scaled a ReplicaSet or the operator's Deployment; edited a Gadget; deleted a pod while Pods are gated with
  ` + "`ungatedChildKinds: []`" + `).
- **Drifts caught**: the controller's revert of an injected drift was denied (Deny, DriftUnapproved) and the
  person's change still stood afterwards (15 s for kube-controller-manager's retries). The test fails unless every
  injected drift is caught.
- **Denied reverts**: the Deny lines of the injected drifts: the controller's first attempt and its retries.

Jobs and CronJobs have no revert behaviour to test (the Job controller does not re-create the pods of a finished
Job, the CronJob controller does not undo a change to a Job it started), so no drift is injected for them.

`)
	b.WriteString("| Workload | Controller writes decided | Person writes decided | False denials | Injected drifts | Drifts caught | Denied reverts |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	var total fidelityRow
	for _, r := range rows {
		if r.allowances {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d |\n", r.kind, r.controllerWrites, r.personWrites, len(r.falseDenials), r.injected, r.caught, r.driftDenials)
		total.add(r)
	}
	fmt.Fprintf(&b, "| **Total** | **%d** | **%d** | **%d** | **%d** | **%d** | **%d** |\n",
		total.controllerWrites, total.personWrites, len(total.falseDenials), total.injected, total.caught, total.driftDenials)

	renderAllowances(&b, rows)
	renderReplicas(&b, replicas)

	for _, r := range rows {
		if r.allowances {
			fmt.Fprintf(&b, "\n## %s, allowances enforced\n\n", r.kind)
		} else {
			fmt.Fprintf(&b, "\n## %s\n\n", r.kind)
		}
		for i, s := range r.steps {
			fmt.Fprintf(&b, "%d. %s\n", i+1, s)
		}
		b.WriteString("\n| Controller | Writes decided | Decisions |\n|---|---:|---|\n")
		for _, name := range sortedKeys(r.byController) {
			counts := r.byController[name]
			fmt.Fprintf(&b, "| %s | %d | %s |\n", name, sumCounts(counts), formatCounts(counts))
		}
	}
	return b.String()
}

func (r *fidelityRow) add(o fidelityRow) {
	r.controllerWrites += o.controllerWrites
	r.personWrites += o.personWrites
	r.falseDenials = append(r.falseDenials, o.falseDenials...)
	r.injected += o.injected
	r.caught += o.caught
	r.driftDenials += o.driftDenials
	r.allowanceChecked += o.allowanceChecked
	r.justified += o.justified
	r.violations = append(r.violations, o.violations...)
	r.traces.seen += o.traces.seen
}

func sumCounts(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func formatCounts(counts map[string]int) string {
	parts := make([]string, 0, len(counts))
	for _, outcome := range sortedKeys(counts) {
		parts = append(parts, fmt.Sprintf("%s %d", outcome, counts[outcome]))
	}
	return strings.Join(parts, ", ")
}

func renderAllowances(b *strings.Builder, rows []fidelityRow) {
	var total fidelityRow
	var longest allowanceTraceFigures
	var lines []string
	for _, r := range rows {
		if !r.allowances {
			continue
		}
		lines = append(lines, fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %d/%d | %d |\n", r.kind, r.controllerWrites, r.allowanceChecked,
			r.justified, len(r.violations), len(r.falseDenials), r.caught, r.injected, r.traces.seen))
		total.add(r)
		if r.traces.hops > longest.hops {
			longest = r.traces
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString(`
## Allowances enforced

Every built-in workload above runs its life cycle a second time, in its own namespace, with the shipped
AllowancePolicies (` + "`manifests/allowances/`" + `) applied and the namespace annotated
` + "`kausality.io/allowance-mode: enforce`" + ` beside drift gating in enforce mode. A controller's mutation of a child is
then allowed only when an allowance on the parent, granted by a person's change of the field that justifies it,
covers it; anything else is an allowance violation and denied.

Scaling goes through ` + "`/scale`" + ` as in the first pass: the allowances a ` + "`/scale`" + ` grants are written to the
scaled object before the ` + "`/scale`" + ` is forwarded, so the controller reacting to it finds them.

- **Allowance-checked writes**: controller writes whose decision line says allowances applied to them.
- **Justified mutations**: the mutations (child fields, create, delete) that an allowance justified.
- **Allowance violations**: controller writes with a mutation nothing allowed, other than the revert of an injected
  drift. Each one would have stopped a legitimate controller action. The test fails unless this is 0.
- **Allowances seen**: distinct allowances the proxy wrote on the workload's objects during the run (read from
  ` + "`kausal.io/allowances`" + ` by a watch, since consumed allowances are pruned). The test fails unless each names its
  initiator and every hop of its trace names its object and the field that changed.

`)
	b.WriteString("| Workload | Controller writes decided | Allowance-checked writes | Justified mutations | Allowance violations | False denials | Drifts caught | Allowances seen |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range lines {
		b.WriteString(l)
	}
	fmt.Fprintf(b, "| **Total** | **%d** | **%d** | **%d** | **%d** | **%d** | **%d/%d** | **%d** |\n", total.controllerWrites, total.allowanceChecked,
		total.justified, len(total.violations), len(total.falseDenials), total.caught, total.injected, total.traces.seen)
	if longest.hops > 0 {
		fmt.Fprintf(b, "\nThe longest trace seen, hop by hop with the field that changed: %s.\n", longest.longest)
	}
}

func renderReplicas(b *strings.Builder, run *replicaRun) {
	if run == nil {
		return
	}
	b.WriteString(`
## Two proxy replicas

The conditions-only operator (Widget → Gadget) again, in its own namespace, with a second proxy replica started
beside the main one. The operator's requests alternate between the two replicas request by request, as a client
behind a Service could land on either; each replica decides from its own cache and from what the cluster records.
The revert of a person's edit is sent through each replica explicitly, then the second replica is restarted and the
same revert is sent through the new process at once, before it has seen the Widget settle.

`)
	for i, s := range run.steps {
		fmt.Fprintf(b, "%d. %s\n", i+1, s)
	}
	b.WriteString("\n| Replica | Operator writes decided | False denials | Reverts denied | Decisions |\n|---|---:|---:|---:|---|\n")
	for i, r := range run.replicas {
		name := r.name
		switch i {
		case 1:
			name = "second replica (before the restart)"
		case 2:
			name = "second replica, restarted"
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %s |\n", name, r.writes, len(r.falseDenials), r.revertsDenied, formatCounts(r.byOutcome))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
