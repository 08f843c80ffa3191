//go:build hardening

package hardening

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// fieldManager is the controllers' field manager.
const fieldManager = "hardening-controller"

// warnings records the Warning headers one client receives. A controller
// sends one request at a time, so what arrives between two takes belongs
// to the request in between.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// controller is one scripted controller identity: it owns the Rig "rig" in
// its namespace and writes Tallies under it, through the replicas in turn.
type controller struct {
	idx    int
	user   string
	ns     string
	rigUID types.UID
	// base is the identity's client-certificate config, straight to
	// kube-apiserver; through each replica it is clients[i].
	base     *rest.Config
	clients  [numReplicas]dynamic.Interface
	warnings [numReplicas]*warnings
	ledger   *ledger
	bad      *violations

	next int
	seq  int
	// rounds is how many rounds it completed.
	rounds int
}

// newController creates the namespace (enforce mode), the RBAC, the
// identity and the Rig, and has the controller write the Rig's status
// through the proxy, so that the proxy records it as the Rig's
// controller; it returns once the Rig is initialized.
func newController(ctx context.Context, idx int, name string, c *counters, l *ledger, bad *violations) (*controller, error) {
	ctl := &controller{idx: idx, user: "hardening-" + name, ns: "hardening-" + name, ledger: l, bad: bad}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ctl.ns, Annotations: map[string]string{"kausality.io/mode": "enforce"}}}
	if _, err := env.cp.AdminClient().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := grantNamespace(ctx, ctl.ns, ctl.user); err != nil {
		return nil, err
	}
	var err error
	if ctl.base, err = env.cp.AddUser(ctl.user, nil); err != nil {
		return nil, err
	}
	for i, r := range env.replicas {
		cfg := r.through(ctl.base)
		cfg.QPS, cfg.Burst = 1000, 2000
		cfg.Timeout = 60 * time.Second
		ctl.warnings[i] = &warnings{}
		cfg.WarningHandler = ctl.warnings[i]
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, counters: c} })
		if ctl.clients[i], err = dynamic.NewForConfig(cfg); err != nil {
			return nil, err
		}
	}
	rig := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/" + version, "kind": "Rig",
		"metadata": map[string]any{"name": "rig", "namespace": ctl.ns},
		"spec":     map[string]any{"size": int64(1)},
	}}
	created, err := env.admin.Resource(rigGVR).Namespace(ctl.ns).Create(ctx, rig, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	ctl.rigUID = created.GetUID()
	if err := ctl.writeStatus(ctx, created.GetGeneration()); err != nil {
		return nil, err
	}
	return ctl, poll(ctx, 60*time.Second, func() error {
		got, err := env.admin.Resource(rigGVR).Namespace(ctl.ns).Get(ctx, "rig", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if a := got.GetAnnotations(); a["kausality.io/phase"] != "initialized" || a["kausality.io/controllers"] == "" {
			return fmt.Errorf("%s/rig: phase %q, controllers %q", ctl.ns, a["kausality.io/phase"], a["kausality.io/controllers"])
		}
		return nil
	})
}

// pick alternates the replicas.
func (c *controller) pick() int {
	c.next++
	return c.next % numReplicas
}

func (c *controller) marker() string {
	c.seq++
	return fmt.Sprintf("m-%02d-%05d", c.idx, c.seq)
}

func (c *controller) tallies(replica int) dynamic.ResourceInterface {
	return c.clients[replica].Resource(tallyGVR).Namespace(c.ns)
}

func (c *controller) record(kind writeKind, tally, marker string, replica int, start time.Time, err error) *entry {
	o, code := classify(err)
	e := &entry{controller: c.idx, kind: kind, tally: tally, marker: marker, replica: replica, start: start, end: time.Now(), outcome: o, code: code}
	if err != nil {
		e.err = err.Error()
	}
	c.ledger.add(e)
	return e
}

// bumpRig is a person changing the Rig's spec (straight to kube-apiserver):
// the controller has work to do. It returns the new generation.
func (c *controller) bumpRig(ctx context.Context, size int) (int64, error) {
	patch := fmt.Sprintf(`{"spec":{"size":%d}}`, size)
	var gen int64
	err := poll(ctx, 2*time.Minute, func() error {
		got, err := env.admin.Resource(rigGVR).Namespace(c.ns).Patch(ctx, "rig", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			return err
		}
		gen = got.GetGeneration()
		return nil
	})
	return gen, err
}

// writeStatus is the controller reporting the Rig settled at generation:
// observedGeneration and Ready=True, through a replica, until it succeeds.
func (c *controller) writeStatus(ctx context.Context, generation int64) error {
	return poll(ctx, 2*time.Minute, func() error {
		r := c.pick()
		rig, err := c.clients[r].Resource(rigGVR).Namespace(c.ns).Get(ctx, "rig", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rig.GetGeneration() != generation {
			return fmt.Errorf("the Rig is at generation %d, not %d", rig.GetGeneration(), generation)
		}
		rig.Object["status"] = map[string]any{
			"observedGeneration": generation,
			"conditions": []any{map[string]any{
				"type": "Ready", "status": "True", "reason": "Reconciled",
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			}},
		}
		start := time.Now()
		_, err = c.clients[r].Resource(rigGVR).Namespace(c.ns).UpdateStatus(ctx, rig, metav1.UpdateOptions{FieldManager: fieldManager})
		c.record(kindStatus, "", "", r, start, err)
		return err
	})
}

// create creates the Tally name, retrying until one attempt is accepted or
// an earlier attempt turns out to have been applied.
func (c *controller) create(ctx context.Context, name string) error {
	return poll(ctx, 2*time.Minute, func() error {
		marker := c.marker()
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/" + version, "kind": "Tally",
			"metadata": map[string]any{"name": name, "namespace": c.ns},
			"spec":     map[string]any{"created": marker, "count": int64(0), "keys": map[string]any{}},
		}}
		obj.SetOwnerReferences([]metav1.OwnerReference{{
			APIVersion: group + "/" + version, Kind: "Rig", Name: "rig", UID: c.rigUID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}})
		r := c.pick()
		start := time.Now()
		_, err := c.tallies(r).Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
		e := c.record(kindCreate, name, marker, r, start, err)
		switch {
		case e.outcome == accepted, apierrors.IsAlreadyExists(err):
			return nil
		case e.outcome == denied:
			c.bad.add("%s: the create of Tally %s under a reconciling Rig was denied: %v", c.ns, name, err)
			return nil
		}
		return err
	})
}

// update makes one read-modify-write of the Tally: count+1 and a new key,
// with the resourceVersion it read as a precondition. The read is retried;
// the write is made once, and its entry returned.
func (c *controller) update(ctx context.Context, kind writeKind, name string) (*entry, error) {
	// The read and the write go to the same replica, as a client's do
	// over its one connection; the next update goes to the other.
	r := c.pick()
	var cur *unstructured.Unstructured
	err := poll(ctx, 2*time.Minute, func() error {
		var err error
		cur, err = c.tallies(r).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	count, _, _ := unstructured.NestedInt64(cur.Object, "spec", "count")
	marker := c.marker()
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": cur.GetResourceVersion()},
		"spec":     map[string]any{"count": count + 1, "keys": map[string]any{marker: true}},
	})
	start := time.Now()
	_, err = c.tallies(r).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	return c.record(kind, name, marker, r, start, err), nil
}

// expected updates the Tally while the Rig reconciles, until one attempt
// is accepted: an expected write is never denied.
func (c *controller) expected(ctx context.Context, name string) error {
	return poll(ctx, 2*time.Minute, func() error {
		e, err := c.update(ctx, kindExpected, name)
		if err != nil {
			return err
		}
		switch e.outcome {
		case accepted:
			return nil
		case denied:
			c.bad.add("%s: an expected update of Tally %s (Rig reconciling) was denied: %s", c.ns, name, e.err)
			return nil
		}
		return errors.New(e.err)
	})
}

// drift updates the Tally under a settled Rig: enforce mode denies it.
func (c *controller) drift(ctx context.Context, name string) error {
	e, err := c.update(ctx, kindDrift, name)
	if err != nil {
		return err
	}
	if e.outcome == accepted {
		c.bad.add("%s: drift of Tally %s under a settled Rig was accepted through %s", c.ns, name, env.replicas[e.replica].name)
	}
	return nil
}

// approveOnce is a person approving the next drift of the Tally once
// (straight to kube-apiserver).
func (c *controller) approveOnce(ctx context.Context, name string, generation int64) error {
	approvals, _ := json.Marshal([]map[string]any{{
		"apiVersion": group + "/" + version, "kind": "Tally", "name": name, "generation": generation, "mode": "once",
	}})
	return c.setApprovals(ctx, ptr.To(string(approvals)))
}

func (c *controller) setApprovals(ctx context.Context, value *string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"kausality.io/approvals": value}}})
	return poll(ctx, 2*time.Minute, func() error {
		_, err := env.admin.Resource(rigGVR).Namespace(c.ns).Patch(ctx, "rig", types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// approvalPresent reads (straight from kube-apiserver) whether the Rig
// still carries an approval for the Tally.
func (c *controller) approvalPresent(ctx context.Context, name string) (bool, error) {
	var present bool
	err := poll(ctx, 2*time.Minute, func() error {
		rig, err := env.admin.Resource(rigGVR).Namespace(c.ns).Get(ctx, "rig", metav1.GetOptions{})
		if err != nil {
			return err
		}
		var list []map[string]any
		if raw := rig.GetAnnotations()["kausality.io/approvals"]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &list); err != nil {
				return fmt.Errorf("approvals %q: %w", raw, err)
			}
		}
		present = false
		for _, a := range list {
			present = present || a["name"] == name
		}
		return nil
	})
	return present, err
}

// approvalSettleWait is how long an approval spent by a write without a
// clear answer may take to come back: not before the write can no longer
// land (40s after it was reserved, with the replicas' --request-timeout
// of 30s); the proxy retries the read of the object with backoff (at most
// 15s apart) while kube-apiserver restarts or the replica is cut off from
// it, and when the replica was killed, the other one settles its record
// once it is older than 30s (looking every 10s).
const approvalSettleWait = 2 * time.Minute

// approvalReturns waits for the once approval of Tally name to be put back
// on the Rig, and reports whether it was. A write that landed (its marker
// is in the Tally) spent the approval: there is nothing to wait for.
func (c *controller) approvalReturns(ctx context.Context, name, marker string) (bool, error) {
	deadline := time.Now().Add(approvalSettleWait)
	for time.Now().Before(deadline) {
		present, err := c.approvalPresent(ctx, name)
		if err != nil || present {
			return present, err
		}
		if tally, err := env.admin.Resource(tallyGVR).Namespace(c.ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			if landed, _, _ := unstructured.NestedBool(tally.Object, "spec", "keys", marker); landed {
				return false, nil
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return false, nil
}

// approved makes the drift write the once approval admits, until an
// attempt consumed it. After each attempt the approval must be gone
// exactly when the write was accepted (or may have been applied).
func (c *controller) approved(ctx context.Context, name string) error {
	deadline := time.Now().Add(2 * approvalSettleWait)
	for time.Now().Before(deadline) {
		e, err := c.update(ctx, kindApproved, name)
		if err != nil {
			return err
		}
		present, err := c.approvalPresent(ctx, name)
		if err != nil {
			return err
		}
		if !present && (e.outcome == failed || e.outcome == broken) {
			// An answer that does not say whether the write landed: the
			// proxy settles the approval from what is stored, in the
			// background while kube-apiserver cannot be read.
			if present, err = c.approvalReturns(ctx, name, e.marker); err != nil {
				return err
			}
		}
		e.approvalConsumed = !present
		switch {
		case e.outcome == accepted && present:
			c.bad.add("%s: the approved write of Tally %s was accepted, and its once approval is still on the Rig", c.ns, name)
		case (e.outcome == denied || e.outcome == refused) && !present:
			c.bad.add("%s: the once approval of Tally %s was consumed by a write answered %d: %s", c.ns, name, e.code, e.err)
		}
		if !present {
			return nil
		}
		if e.outcome == denied {
			// The replica's view lags the approval; a dry-run probe
			// waits for it before the next attempt.
			if err := c.waitDecision(ctx, name, "Allow/DriftApproved", e.replica); err != nil {
				return err
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s: no approved write of Tally %s consumed its approval in %s", c.ns, name, 2*approvalSettleWait)
}

var dryRunWarning = regexp.MustCompile(`^kausality dry-run: (\w+) \((\w+)\)`)

// decisionOf names the decision of a dry-run write: "Result/Category".
func decisionOf(err error, warned []string) string {
	if err == nil {
		for _, w := range warned {
			if m := dryRunWarning.FindStringSubmatch(w); m != nil {
				return m[1] + "/" + m[2]
			}
		}
		return fmt.Sprintf("Allow/<no dry-run warning in %q>", warned)
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code == http.StatusForbidden && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			switch c.Type {
			case "KausalityUnapproved":
				return "Deny/DriftUnapproved"
			case "KausalityRejected":
				return "Deny/DriftRejected"
			case "KausalityFrozen":
				return "Deny/Frozen"
			}
		}
	}
	return "error: " + err.Error()
}

// probe is a dry-run drift write of the Tally through one replica: the
// replica's decision, with no effect anywhere.
func (c *controller) probe(ctx context.Context, name string, replica int) string {
	c.warnings[replica].take()
	patch := `{"spec":{"keys":{"probe":true}}}`
	_, err := c.tallies(replica).Patch(ctx, name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: fieldManager, DryRun: []string{metav1.DryRunAll}})
	return decisionOf(err, c.warnings[replica].take())
}

// waitDecision waits until every given replica (all when none is given)
// decides want for a drift write of the Tally. The replicas read the Rig
// from informer caches that may trail the change the test just made; a
// dry run waits for them without side effects.
func (c *controller) waitDecision(ctx context.Context, name, want string, replicas ...int) error {
	if len(replicas) == 0 {
		for i := range env.replicas {
			replicas = append(replicas, i)
		}
	}
	for _, r := range replicas {
		var got string
		err := poll(ctx, 2*time.Minute, func() error {
			if got = c.probe(ctx, name, r); got != want {
				return errors.New(got)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %s decides %s for Tally %s, want %s: %w", c.ns, env.replicas[r].name, got, name, want, err)
		}
	}
	return nil
}

// round is one reconciliation of the Rig and what follows it: a person
// changes the Rig's spec; the controller creates a Tally and updates it
// (expected), reports the Rig settled, then drifts (denied), gets a once
// approval and makes the one write it admits, and drifts again (denied).
func (c *controller) round(ctx context.Context, n int) error {
	gen, err := c.bumpRig(ctx, n+2)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("t-%03d", n)
	if err := c.create(ctx, name); err != nil {
		return err
	}
	for range 3 {
		if err := c.expected(ctx, name); err != nil {
			return err
		}
	}
	if err := c.writeStatus(ctx, gen); err != nil {
		return err
	}
	if err := c.waitDecision(ctx, name, "Deny/DriftUnapproved"); err != nil {
		return err
	}
	for range 2 {
		if err := c.drift(ctx, name); err != nil {
			return err
		}
	}
	if err := c.approveOnce(ctx, name, gen); err != nil {
		return err
	}
	if err := c.waitDecision(ctx, name, "Allow/DriftApproved"); err != nil {
		return err
	}
	if err := c.approved(ctx, name); err != nil {
		return err
	}
	if err := c.waitDecision(ctx, name, "Deny/DriftUnapproved"); err != nil {
		return err
	}
	return c.drift(ctx, name)
}

// poll calls f until it succeeds, ctx ends or timeout passes.
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	wait := 50 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
