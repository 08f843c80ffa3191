//go:build !kind

package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// mainProxyName names the suite's own proxy among the replicas.
const mainProxyName = "main proxy"

// The parts of the fidelity run that need the local control plane: the
// in-test operators (their CRDs and service account), the shipped
// AllowancePolicies, and extra proxy replicas.
func init() {
	fidelityOperators = func() []*fidelityCase {
		operator := func(kind string, run func(*testing.T, *fidelityCase)) *fidelityCase {
			c := &fidelityCase{workload: &workload{kind: kind, plannedDrifts: 1}, operator: wgControllerUser}
			c.run = func(t *testing.T, _ *workload) { run(t, c) }
			return c
		}
		return []*fidelityCase{
			operator("Widget → Gadget, observedGeneration only in the Ready condition", runConditionsOnlyOperator),
			operator("Widget → Deployment, only an Available condition (memcached pattern)", runAvailableOnlyOperator),
			operator("Widget → Deployment, only an Available condition, status patched without a resourceVersion", runPatchedAvailableOperator),
		}
	}
	fidelityAllowancePolicies = applyShippedAllowancePolicies
	fidelityTwoReplicas = runTwoReplicas
}

// roundRobin sends each write to the next of its backends, and a read to
// the backend of the last write: the operator's writes are spread across
// proxy replicas as a Service in front of them would spread connections,
// but per write, so that consecutive writes of one reconcile land on
// different replicas. (Alternating every request would send each
// read-modify-write's write to the same replica.)
type roundRobin struct {
	writes   atomic.Uint64
	backends []roundRobinBackend
}

type roundRobinBackend struct {
	host      string
	transport http.RoundTripper
}

func (r *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	n := r.writes.Load()
	if req.Method != http.MethodGet {
		n = r.writes.Add(1)
	}
	b := r.backends[n%uint64(len(r.backends))]
	req = req.Clone(req.Context())
	req.URL.Host, req.Host = b.host, ""
	return b.transport.RoundTrip(req)
}

// roundRobinActor is the operator talking to every config in turn, each
// with its own TLS trust and credentials.
func roundRobinActor(t *testing.T, user, userAgent string, cfgs ...*rest.Config) *wgActor {
	t.Helper()
	rr := &roundRobin{}
	for _, cfg := range cfgs {
		rt, err := rest.TransportFor(cfg)
		mustf(t, err, "a transport to %s", cfg.Host)
		u, err := url.Parse(cfg.Host)
		mustf(t, err, "parsing %s", cfg.Host)
		rr.backends = append(rr.backends, roundRobinBackend{host: u.Host, transport: rt})
	}
	return wgNewActor(t, &rest.Config{Host: cfgs[0].Host, Transport: rr, UserAgent: userAgent}, user)
}

// runTwoReplicas: the conditions-only operator's writes spread across the
// main proxy and a second replica; a person's edit of its child is held
// against the operator's revert on both, and again after the second
// replica is restarted.
func runTwoReplicas(t *testing.T) *replicaRun {
	run := &replicaRun{}
	step := func(what string, f func()) {
		t.Helper()
		f()
		run.steps = append(run.steps, what)
	}
	f := newWGFamily(t, "fidelity-replicas", "enforce")
	second := replicaPeer(t, "fidelity")
	viaMain := f.ctrl
	viaSecond := viaMain.via(t, second)
	spread := roundRobinActor(t, viaMain.user, viaMain.cfg.UserAgent, viaMain.cfg, second.Through(viaMain.cfg))
	// settleBoth waits until each replica's cache has caught up with the
	// Widget, probing through each, then spreads the writes again.
	settleBoth := func(want string) {
		t.Helper()
		for _, a := range []*wgActor{viaMain, viaSecond} {
			f.ctrl = a
			f.settleGadget("g", want)
		}
		f.ctrl = spread
	}
	f.ctrl = spread
	step("the operator creates Gadgets g and h and reports Ready in the condition, its writes alternating between the replicas", func() {
		for _, name := range []string{"g", "h"} {
			_, err := f.createGadget(name, "a", false)
			mustf(t, err, "the operator creates Gadget %s", name)
		}
		f.setReadyCondition(f.getWidget().GetGeneration())
		f.waitWidgetInitialized()
		waitSettledRecord(t, "", f.uid, "")
		settleBoth("Deny/DriftUnapproved")
	})
	for i, value := range []string{"b", "c"} {
		step(fmt.Sprintf("a person changes the Widget's spec (%d of 2); the operator updates both Gadgets through alternating replicas, then reports Ready", i+1), func() {
			generation := f.bumpSpec()
			settleBoth("Allow/Expected")
			for _, name := range []string{"g", "h"} {
				_, err := f.setValue(name, value, false)
				mustf(t, err, "the operator carries out the spec change on Gadget %s", name)
			}
			f.setReadyCondition(generation)
			settleBoth("Deny/DriftUnapproved")
		})
	}
	marks := map[string]int{}
	mark := func(name string, lines []framework.DecisionLine) { marks[name] = len(lines) }
	mark(mainProxyName, replicaDecisions(t, nil))
	mark(second.Name, replicaDecisions(t, second))
	revertDenied := func(via *wgActor, where string) {
		t.Helper()
		if err := f.revertVia(via, "c"); !denied(err) {
			t.Fatalf("the operator's revert through %s: %v, want a 403 for unapproved drift", where, err)
		}
		if got := f.gadgetValue("g"); got != "person" {
			t.Fatalf("after the revert through %s, Gadget g holds %q, want the person's value", where, got)
		}
		run.revertsTried++
	}
	step("drift: a person edits Gadget g; the operator's revert is denied through the main proxy, the second replica, and twice more alternating", func() {
		_, err := f.writeGadget(f.alice, "g", false, func(g *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(g.Object, "person", "spec", "value")
		})
		mustf(t, err, "a person edits Gadget g")
		revertDenied(viaMain, "the main proxy")
		revertDenied(viaSecond, "the second replica")
		revertDenied(spread, "alternating replicas")
		revertDenied(spread, "alternating replicas")
	})
	restarted := restartReplica(t, second, "fidelity-restarted")
	step("the second replica is restarted; the same revert is denied through the restarted replica at once, then through the main proxy", func() {
		revertDenied(viaMain.via(t, restarted), "the restarted replica")
		revertDenied(viaMain, "the main proxy")
	})

	for _, r := range []struct {
		name    string
		replica *framework.Replica
	}{{mainProxyName, nil}, {second.Name, second}, {restarted.Name, restarted}} {
		run.replicas = append(run.replicas, replicaFiguresOf(r.name, f.ns, f.widget, viaMain.user, replicaDecisions(t, r.replica), marks[r.name]))
	}
	return run
}

// replicaDecisions are the decision lines of r, or of the main proxy for
// nil.
func replicaDecisions(t *testing.T, r *framework.Replica) []framework.DecisionLine {
	t.Helper()
	if r == nil {
		all, err := cluster.Decisions()
		mustf(t, err, "reading the main proxy's decisions")
		return all
	}
	log, err := r.Log()
	mustf(t, err, "reading %s's log", r.Name)
	all, err := framework.ParseDecisions(bytes.NewReader(log))
	mustf(t, err, "parsing %s's decisions", r.Name)
	return all
}

// replicaFiguresOf counts one replica's decisions of the operator's writes
// in ns and of its Widget; lines at or after driftMark are after the person's edit, and a
// Deny among them of the operator's write to Gadget g is its revert.
func replicaFiguresOf(name, ns, widget, operator string, lines []framework.DecisionLine, driftMark int) replicaFigures {
	rf := replicaFigures{name: name, byOutcome: map[string]int{}}
	for i, l := range lines {
		if l.Str("namespace") != ns && (l.Str("resource") != "widgets" || l.Str("name") != widget) {
			continue
		}
		if l.Bool("dryRun") || l.Str("user") != operator {
			continue
		}
		rf.writes++
		rf.byOutcome[strings.TrimSpace(l.Str("decision")+" "+l.Str("category"))]++
		if l.Str("decision") != "Deny" {
			continue
		}
		if i >= driftMark && l.Str("resource") == "gadgets" && l.Str("name") == "g" && l.Str("category") == "DriftUnapproved" {
			rf.revertsDenied++
			continue
		}
		rf.falseDenials = append(rf.falseDenials, l)
	}
	return rf
}
