//go:build hardening

package hardening

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/internal/reliability"
)

const (
	numControllers = 20
	numWatches     = 200
	// warmRounds run without faults; CPU per write is measured over them.
	warmRounds = 6
	// A controller keeps running rounds while the faults are injected,
	// and at least this many after the last one.
	roundsAfterFaults = 1
	// Most rounds a controller runs, whatever happens.
	maxRounds = 40
)

// TestLoadAndFaults runs twenty controllers' writes through both replicas
// while two hundred watches stay open, then injects faults into the same
// load (kube-apiserver killed and restarted, a replica killed with SIGKILL
// and restarted, a replica cut off from kube-apiserver) and checks the
// ledger of every write against etcd, the once approvals against their
// writes, and that every watch resumed.
func TestLoadAndFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	counts := &counters{}
	l := newLedger()
	bad := &violations{}
	fig := &reliability.Load{Controllers: numControllers, Replicas: numReplicas, Watches: numWatches}
	env.figures.Load = fig

	// The controllers, set up concurrently, and one more that takes no
	// load and only probes the replicas' parent caches across the faults.
	ctls := make([]*controller, numControllers)
	var setup sync.WaitGroup
	setupErrs := make([]error, numControllers+1)
	for i := range ctls {
		setup.Add(1)
		go func() {
			defer setup.Done()
			ctls[i], setupErrs[i] = newController(ctx, i, fmt.Sprintf("c%02d", i), counts, l, bad)
		}()
	}
	var canary *controller
	setup.Add(1)
	go func() {
		defer setup.Done()
		canary, setupErrs[numControllers] = newController(ctx, numControllers, "canary", &counters{}, newLedger(), bad)
	}()
	setup.Wait()
	for _, err := range setupErrs {
		if err != nil {
			t.Fatalf("setting up a controller: %v", err)
		}
	}
	// The canary's Tally is created while its Rig reconciles, as any
	// child is; then the Rig settles.
	gen, err := canary.bumpRig(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := canary.create(ctx, "probe"); err != nil {
		t.Fatalf("canary Tally: %v", err)
	}
	if err := canary.writeStatus(ctx, gen); err != nil {
		t.Fatal(err)
	}

	// Memory per open watch: both replicas' RSS before and after the
	// watches opened.
	before := rssTotal(t)
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	var watchers []*watcher
	for i := 0; i < numWatches; i++ {
		w, err := newWatcher(ctls[i%numControllers], (i/numControllers)%numReplicas, counts)
		if err != nil {
			t.Fatal(err)
		}
		watchers = append(watchers, w)
		go w.run(watchCtx)
	}
	for _, w := range watchers {
		select {
		case <-w.opened:
		case <-time.After(2 * time.Minute):
			t.Fatalf("a watch through %s did not open", env.replicas[w.replica].name)
		}
	}
	time.Sleep(2 * time.Second)
	after := rssTotal(t)
	fig.RSSBeforeWatchesKiB, fig.RSSAfterWatchesKiB = before, after
	fig.MemoryPerWatchKiB = float64(after-before) / numWatches
	t.Logf("RSS of both replicas: %d KiB before %d watches, %d KiB with them: %.1f KiB per watch", before, numWatches, after, fig.MemoryPerWatchKiB)

	loadStart := time.Now()
	// Phase 1: load without faults; CPU per write is measured over it.
	cpuBefore, writesBefore := cpuTotal(t), counts.writes.Load()
	runRounds(ctx, t, ctls, func(c *controller, n int) bool { return n < warmRounds })
	cpuUsed, writes := cpuTotal(t)-cpuBefore, counts.writes.Load()-writesBefore
	fig.CPUSeconds, fig.CPUPhaseWrites = cpuUsed.Seconds(), writes
	fig.CPUPerWriteMs = float64(cpuUsed.Milliseconds()) / float64(writes)
	t.Logf("fault-free phase: %d write requests, %s CPU in both replicas: %.2f ms per write", writes, cpuUsed, fig.CPUPerWriteMs)

	// Phase 2: the same load, with the faults injected one after another.
	var faultsDone atomic.Bool
	roundAtEnd := make([]atomic.Int64, numControllers)
	faultErr := make(chan error, 1)
	go func() {
		defer faultsDone.Store(true)
		faultErr <- injectFaults(ctx, t, canary, l)
	}()
	runRounds(ctx, t, ctls, func(c *controller, n int) bool {
		if n >= maxRounds {
			return false
		}
		if !faultsDone.Load() {
			roundAtEnd[c.idx].Store(int64(n))
			return true
		}
		return int64(n) <= roundAtEnd[c.idx].Load()+roundsAfterFaults
	})
	if err := <-faultErr; err != nil {
		t.Errorf("injecting faults: %v", err)
	}
	fig.Seconds = time.Since(loadStart).Seconds()
	for _, c := range ctls {
		fig.Rounds += c.rounds
	}

	// Every watch resumed: a Tally created now (straight to
	// kube-apiserver) reaches all of them.
	for _, c := range ctls {
		sentinel := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/" + version, "kind": "Tally",
			"metadata": map[string]any{"name": "sentinel", "namespace": c.ns},
			"spec":     map[string]any{"created": "sentinel"},
		}}
		if _, err := env.admin.Resource(tallyGVR).Namespace(c.ns).Create(ctx, sentinel, metav1.CreateOptions{}); err != nil {
			t.Fatalf("sentinel in %s: %v", c.ns, err)
		}
	}
	if err := poll(ctx, 2*time.Minute, func() error {
		missing := 0
		for _, w := range watchers {
			if !w.saw("sentinel") {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d watches have not seen the sentinel", missing, len(watchers))
		}
		return nil
	}); err != nil {
		t.Errorf("watches did not resume: %v", err)
	}
	for _, w := range watchers {
		fig.WatchEvents += w.events.Load()
		fig.WatchRewatches += w.rewatches.Load()
		fig.WatchRelists += w.relists.Load() - 1
	}
	stopWatches()

	verifyLedger(ctx, t, ctls, l, bad, fig)
	for _, e := range l.all() {
		if e.outcome == broken || e.outcome == failed {
			t.Logf("%s %s write %s of hardening-c%02d/%s through %s at %s: %s (applied: %v)", e.outcome, e.kind, e.marker, e.controller, e.tally,
				env.replicas[e.replica].name, e.end.Format("15:04:05.000"), e.err, e.applied)
		}
	}
	fig.Requests, fig.WriteRequests = counts.requests.Load(), counts.writes.Load()
	for _, v := range bad.take() {
		t.Error(v)
	}
	t.Logf("load: %d rounds, %d requests (%d writes), %d ledger writes verified, %d watch events, %d re-watches",
		fig.Rounds, fig.Requests, fig.WriteRequests, fig.VerifiedWrites, fig.WatchEvents, fig.WatchRewatches)
}

// runRounds runs rounds of every controller concurrently, each while more
// says so.
func runRounds(ctx context.Context, t *testing.T, ctls []*controller, more func(c *controller, n int) bool) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range ctls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for more(c, c.rounds) {
				if err := c.round(ctx, c.rounds); err != nil {
					t.Errorf("%s round %d: %v", c.ns, c.rounds, err)
					return
				}
				c.rounds++
			}
		}()
	}
	wg.Wait()
}

// verifyLedger reads every Tally straight from kube-apiserver and holds
// the ledger against it.
func verifyLedger(ctx context.Context, t *testing.T, ctls []*controller, l *ledger, bad *violations, fig *reliability.Load) {
	t.Helper()
	applied := map[string]int{} // marker → times found in etcd
	for _, c := range ctls {
		list, err := env.admin.Resource(tallyGVR).Namespace(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing the Tallies of %s: %v", c.ns, err)
		}
		for _, obj := range list.Items {
			if obj.GetName() == "sentinel" {
				continue
			}
			fig.TalliesCreated++
			created, _, _ := unstructured.NestedString(obj.Object, "spec", "created")
			applied[created]++
			count, _, _ := unstructured.NestedInt64(obj.Object, "spec", "count")
			keys, _, _ := unstructured.NestedMap(obj.Object, "spec", "keys")
			if int(count) != len(keys) {
				// count is incremented by every applied update, keys
				// holds each one's marker: a write applied twice makes
				// count run ahead.
				bad.add("%s/%s: count %d but %d keys: a write was applied more than once", c.ns, obj.GetName(), count, len(keys))
				fig.Duplicated += int(count) - len(keys)
			}
			for k := range keys {
				applied[k]++
			}
			if len(keys) > 0 || obj.GetGeneration() > 1 {
				fig.TracesChecked++
				if err := checkTrace(&obj); err != nil {
					bad.add("%s/%s: %v", c.ns, obj.GetName(), err)
				}
			}
		}
	}
	for marker := range applied {
		if _, ok := l.byMarker[marker]; !ok {
			bad.add("marker %s is in etcd, but no write of the ledger carried it", marker)
		}
	}
	// Every round's approval was spent by its write: none may come back
	// later (a settlement that put back the approval of a write that
	// landed).
	for _, c := range ctls {
		if err := poll(ctx, 30*time.Second, func() error {
			rig, err := env.admin.Resource(rigGVR).Namespace(c.ns).Get(ctx, "rig", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if v := rig.GetAnnotations()["kausality.io/approvals"]; v != "" && v != "[]" {
				return fmt.Errorf("approvals %s", v)
			}
			return nil
		}); err != nil {
			bad.add("%s/rig still carries once approvals after every round spent its own: %v", c.ns, err)
		}
	}
	outcomes := map[[2]string]int{}
	for _, e := range l.all() {
		outcomes[[2]string{string(e.kind), e.outcome.String()}]++
		if e.marker == "" {
			continue
		}
		fig.VerifiedWrites++
		n := applied[e.marker]
		e.applied = n > 0
		if n > 1 {
			fig.Duplicated++
			bad.add("%s write %s of %s is in etcd %d times", e.kind, e.marker, e.tally, n)
		}
		switch e.outcome {
		case accepted:
			if !e.applied {
				fig.Lost++
				bad.add("%s write %s of hardening-c%02d/%s was accepted (through %s) but is not in etcd", e.kind, e.marker, e.controller, e.tally, env.replicas[e.replica].name)
			}
		case denied, refused:
			if e.applied {
				fig.RefusedButApplied++
				bad.add("%s write %s of hardening-c%02d/%s was answered %d (%s) but is in etcd", e.kind, e.marker, e.controller, e.tally, e.code, e.err)
			}
		case failed, broken:
			if e.outcome == broken && !killed.covers(e) {
				bad.add("%s write %s of hardening-c%02d/%s through %s got no answer, though that replica was not killed: %s",
					e.kind, e.marker, e.controller, e.tally, env.replicas[e.replica].name, e.err)
			}
			if e.applied {
				fig.UncertainApplied++
			} else {
				fig.UncertainNotApplied++
			}
		}
		if e.kind == kindApproved && e.approvalConsumed {
			fig.ApprovalsConsumed++
			if !e.applied {
				switch {
				case killed.reaches(e, approvalSettleWait):
					// The replica died between reserving the approval
					// and settling it: the other replica settles its
					// record once it is an orphan.
					fig.ApprovalsLostWithReplica++
					bad.add("the once approval of hardening-c%02d/%s was spent by write %s through the killed %s, which is not in etcd, and no replica put it back",
						e.controller, e.tally, e.marker, env.replicas[e.replica].name)
				case e.outcome == failed || e.outcome == broken:
					fig.ApprovalsSpentByFailedWrites++
					bad.add("the once approval of hardening-c%02d/%s was spent by write %s, which got no clear answer (%s %d) and is not in etcd, and the replica lived to put it back",
						e.controller, e.tally, e.marker, e.outcome, e.code)
				default:
					bad.add("the once approval of hardening-c%02d/%s was consumed by write %s, which is not in etcd (%s %d)", e.controller, e.tally, e.marker, e.outcome, e.code)
				}
			}
		}
		if e.kind == kindApproved && !e.approvalConsumed && e.applied {
			bad.add("approved write %s of hardening-c%02d/%s is in etcd, but its once approval was not consumed", e.marker, e.controller, e.tally)
		}
	}
	keys := make([][2]string, 0, len(outcomes))
	for k := range outcomes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1] < keys[j][0]+keys[j][1] })
	for _, k := range keys {
		fig.Outcomes = append(fig.Outcomes, reliability.OutcomeCount{Kind: k[0], Outcome: k[1], Count: outcomes[k]})
	}
}

func rssTotal(t *testing.T) int64 {
	t.Helper()
	var sum int64
	for _, r := range env.replicas {
		kib, err := r.rssKiB()
		if err != nil {
			t.Fatal(err)
		}
		sum += kib
	}
	return sum
}

func cpuTotal(t *testing.T) time.Duration {
	t.Helper()
	var sum time.Duration
	for _, r := range env.replicas {
		d, err := r.cpu()
		if err != nil {
			t.Fatal(err)
		}
		sum += d
	}
	return sum
}

// injectFaults injects the faults one after another into the running
// load, with a few seconds of load between them.
func injectFaults(ctx context.Context, t *testing.T, canary *controller, l *ledger) error {
	pause := func() { sleep(ctx, 5*time.Second) }
	pause()

	// kube-apiserver dies (SIGKILL) and comes back on the same port. Every
	// watch of both replicas breaks, their parent caches among them: the
	// canary checks that replica-0's resumes.
	start := time.Now()
	var restartTook time.Duration
	resumed, err := canaryAcrossCut(ctx, canary, 0, func() (func(), error) {
		if err := env.cp.RestartAPIServer(ctx); err != nil {
			return nil, err
		}
		restartTook = time.Since(start)
		return func() {}, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver restart: %w", err)
	}
	env.figures.Faults = append(env.figures.Faults, reliability.Fault{
		Name: "kube-apiserver killed and restarted",
		What: "SIGKILL to kube-apiserver, then the same command line again (same port, certificates and etcd)",
		Recovery: fmt.Sprintf("until kube-apiserver answered /readyz again; replica-0's parent cache showed a change made after the restart %.1fs after it was made",
			resumed.Seconds()),
		RecoverySeconds: restartTook.Seconds(),
		Outcomes:        outcomesBetween(l, start, time.Now()),
	})
	pause()

	// A replica dies (SIGKILL) and starts again: it must report ready only
	// once its caches have synced, and decide right from its first request.
	start = time.Now()
	victim := env.replicas[1]
	killed.set(1, start, time.Time{})
	victim.kill()
	if err := victim.start(); err != nil {
		return err
	}
	seen, err := victim.waitReady(ctx)
	if err != nil {
		return err
	}
	killed.set(1, start, time.Now())
	if got := canary.probe(ctx, "probe", 1); got != "Deny/DriftUnapproved" {
		return fmt.Errorf("the restarted %s decided %s right after it reported ready", victim.name, got)
	}
	notes := "not ready answers before ready: none (its caches synced before the first probe)"
	if len(seen.notReady) > 0 {
		var reasons []string
		for reason, n := range seen.notReady {
			reasons = append(reasons, fmt.Sprintf("%s %d", reason, n))
		}
		sort.Strings(reasons)
		notes = "not ready answers before ready, by reason: " + strings.Join(reasons, ", ")
	}
	env.figures.Faults = append(env.figures.Faults, reliability.Fault{
		Name:            "replica killed and restarted",
		What:            "SIGKILL to replica-1 while it serves writes and half the watches, then the binary started again",
		Recovery:        "from the kill until the new process answered /readyz 200",
		RecoverySeconds: time.Since(start).Seconds(),
		Outcomes:        outcomesBetween(l, start, time.Now()),
		Notes:           notes,
	})
	pause()

	// A replica is cut off from kube-apiserver: every connection it has
	// upstream is closed (its informers' watches among them) and none can
	// be made for a while. The Rig changes meanwhile; its cache must catch
	// up once it can reach kube-apiserver again.
	start = time.Now()
	resumed, err = canaryAcrossCut(ctx, canary, 0, func() (func(), error) {
		env.replicas[0].relay.Down()
		return func() {
			sleep(ctx, 3*time.Second)
			if err := env.replicas[0].relay.Up(); err != nil {
				t.Errorf("bringing replica-0's upstream back: %v", err)
			}
		}, nil
	})
	if err != nil {
		return fmt.Errorf("cutting replica-0 off: %w", err)
	}
	env.figures.Faults = append(env.figures.Faults, reliability.Fault{
		Name: "replica cut off from kube-apiserver",
		What: "every upstream connection of replica-0 closed (its parent informer's watch among them) and none accepted for 3s, while the other replica records a status change",
		Recovery: "from reconnecting until replica-0's parent cache showed the change made while it was cut off " +
			"(the informer re-lists with client-go's back-off)",
		RecoverySeconds: resumed.Seconds(),
		Outcomes:        outcomesBetween(l, start, time.Now()),
	})
	pause()
	for _, f := range env.figures.Faults {
		t.Logf("fault %q: recovered in %.1fs (%s); writes answered meanwhile: %v; %s", f.Name, f.RecoverySeconds, f.Recovery, f.Outcomes, f.Notes)
	}
	return nil
}

// killed is the window in which a replica was down after a SIGKILL: the
// only time a write may go without an answer. Anywhere else the proxy
// answers every write it took, if only with a Status saying it failed.
var killed killWindow

type killWindow struct {
	mu       sync.Mutex
	replica  int
	from, to time.Time
}

func (k *killWindow) set(replica int, from, to time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.replica, k.from, k.to = replica, from, to
}

// reaches reports whether the window began before e's replica could have
// finished with e: within settle after e's answer.
func (k *killWindow) reaches(e *entry, settle time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.from.IsZero() && e.replica == k.replica && !e.end.Add(settle).Before(k.from) && (k.to.IsZero() || !e.start.After(k.to))
}

// covers reports whether e overlapped the window.
func (k *killWindow) covers(e *entry) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.from.IsZero() && e.replica == k.replica && !e.end.Before(k.from) && (k.to.IsZero() || !e.start.After(k.to))
}

// canaryAcrossCut checks that replica's cache of the canary's Rig resumes
// across a fault. The Rig's spec changes and replica sees it (a write of
// its controller is expected); the fault breaks replica's watches; the
// controller reports the Rig settled through the other replica; healing
// ends the fault. The controller's next write through replica is drift
// only once replica's cache has the status change, which only a resumed
// watch (or a re-list) brings: a dead informer would keep allowing it as
// expected. It returns how long the cache took after healing.
func canaryAcrossCut(ctx context.Context, canary *controller, replica int, fault func() (heal func(), err error)) (time.Duration, error) {
	rig, err := env.admin.Resource(rigGVR).Namespace(canary.ns).Get(ctx, "rig", metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	size, _, _ := unstructured.NestedInt64(rig.Object, "spec", "size")
	gen, err := canary.bumpRig(ctx, int(size)+1)
	if err != nil {
		return 0, err
	}
	if err := canary.waitDecision(ctx, "probe", "Allow/Expected", replica); err != nil {
		return 0, err
	}
	heal, err := fault()
	if err != nil {
		return 0, err
	}
	other := (replica + 1) % numReplicas
	if err := writeStatusThrough(ctx, canary, other, gen); err != nil {
		return 0, err
	}
	heal()
	healed := time.Now()
	if err := canary.waitDecision(ctx, "probe", "Deny/DriftUnapproved", replica); err != nil {
		return 0, fmt.Errorf("%s's parent cache did not resume: %w", env.replicas[replica].name, err)
	}
	return time.Since(healed), nil
}

// writeStatusThrough is writeStatus through one given replica.
func writeStatusThrough(ctx context.Context, c *controller, replica int, generation int64) error {
	return poll(ctx, 2*time.Minute, func() error {
		patch := fmt.Sprintf(`{"status":{"observedGeneration":%d,"conditions":[{"type":"Ready","status":"True","reason":"Reconciled","lastTransitionTime":%q}]}}`,
			generation, time.Now().UTC().Format(time.RFC3339))
		_, err := c.clients[replica].Resource(rigGVR).Namespace(c.ns).Patch(ctx, "rig", types.MergePatchType, []byte(patch),
			metav1.PatchOptions{FieldManager: fieldManager}, "status")
		return err
	})
}

// outcomesBetween counts the ledger's writes answered in [from, to].
func outcomesBetween(l *ledger, from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, e := range l.all() {
		if !e.end.Before(from) && !e.end.After(to) {
			out[e.outcome.String()]++
		}
	}
	return out
}
