//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/report/drifts"
)

// driftRig is a Widget whose Gadget g the scripted controller drifts
// through proxy replicas of their own: their own drift records namespace,
// Lease and receiver, so that what a test sees is only its own drift.
type driftRig struct {
	t        *testing.T
	f        *wgFamily
	recordNS string
	sink     *framework.ReportSink
	opts     framework.ReplicaOptions
	replicas []*framework.Replica
	ctrls    []*wgActor
}

func newDriftRig(t *testing.T, prefix string, replicas int, customize func(*framework.ReplicaOptions)) *driftRig {
	t.Helper()
	rig := &driftRig{t: t, f: newWGFamily(t, prefix, "enforce"), sink: framework.NewReportSink()}
	t.Cleanup(rig.sink.Close)
	rig.recordNS = newNamespace(t, "drift-records")
	rig.opts = framework.ReplicaOptions{Receivers: []string{rig.sink.URL()}, Drifts: framework.DriftTimings(rig.recordNS)}
	if customize != nil {
		customize(&rig.opts)
	}
	for range replicas {
		rig.start()
	}
	_, err := rig.f.createGadget("g", "v1", false)
	mustf(t, err, "the controller creates Gadget g while its Widget initializes")
	rig.f.initialize()
	return rig
}

// start adds a replica.
func (rig *driftRig) start() *framework.Replica {
	rig.t.Helper()
	o := rig.opts
	o.Name = fmt.Sprintf("%s-%d", rig.recordNS, len(rig.replicas))
	r, err := env.StartReplica(context.Background(), o)
	mustf(rig.t, err, "starting proxy replica %s", o.Name)
	rig.t.Cleanup(r.Stop)
	rig.replicas = append(rig.replicas, r)
	rig.ctrls = append(rig.ctrls, wgNewActor(rig.t, r.Through(rig.f.ctrl.cfg), wgControllerUser))
	return r
}

// drift is the controller writing value to g through replica i: denied,
// the Widget being settled and the write unapproved.
func (rig *driftRig) drift(i int, value string) {
	rig.t.Helper()
	_, err := rig.f.writeGadget(rig.ctrls[i], "g", false, func(g *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(g.Object, value, "spec", "value")
	})
	wgDenied(rig.t, err, rig.f, "Gadget", "g", wgAnnApprovals)
}

// reports returns what the receiver got about g, by phase.
func (rig *driftRig) reports(phase v1alpha1.DriftReportPhase) []v1alpha1.DriftReport {
	var out []v1alpha1.DriftReport
	for _, r := range rig.sink.For(rig.f.ns, "g") {
		if r.Spec.Phase == phase {
			out = append(out, r)
		}
	}
	return out
}

// detected waits for the Detected report of g and returns it.
func (rig *driftRig) detected(within time.Duration) v1alpha1.DriftReport {
	rig.t.Helper()
	eventually(rig.t, within, "the Detected report of Gadget g", func() error {
		if len(rig.reports(v1alpha1.PhaseDetected)) == 0 {
			return fmt.Errorf("none yet (%d reports in all)", len(rig.sink.All()))
		}
		return nil
	})
	return rig.reports(v1alpha1.PhaseDetected)[0]
}

// resolved waits for the Resolved report of g and checks it closes det.
func (rig *driftRig) resolved(det v1alpha1.DriftReport, reason string) {
	rig.t.Helper()
	eventually(rig.t, 20*time.Second, "the Resolved report of Gadget g ("+reason+")", func() error {
		res := rig.reports(v1alpha1.PhaseResolved)
		if len(res) == 0 {
			return fmt.Errorf("none yet")
		}
		if len(res) > 1 || res[0].Spec.ID != det.Spec.ID || res[0].Spec.Reason != reason {
			return fmt.Errorf("Resolved reports %+v, want one with id %s and reason %s", res, det.Spec.ID, reason)
		}
		return nil
	})
}

// records returns the drift records of the rig.
func (rig *driftRig) records() []corev1.ConfigMap {
	rig.t.Helper()
	list, err := directClient(rig.t).CoreV1().ConfigMaps(rig.recordNS).List(context.Background(),
		metav1.ListOptions{LabelSelector: drifts.ComponentLabel + "=drift-record"})
	mustf(rig.t, err, "listing drift records")
	return list.Items
}

// metricValue returns the value of a gauge or counter line served at a
// metrics address.
func metricValue(t *testing.T, metricsURL, line string) string {
	t.Helper()
	resp, err := http.Get(metricsURL + "/metrics")
	mustf(t, err, "metrics at %s", metricsURL)
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, line+" ") {
			return strings.TrimPrefix(l, line+" ")
		}
	}
	return ""
}

func TestDriftReportsOnceAcrossReplicas(t *testing.T) {
	rig := newDriftRig(t, "dr-once", 2, nil)
	// The controller retries its drift through both replicas, as it would
	// behind a Service: each replica detects it.
	for i := range 6 {
		rig.drift(i%2, "drifted")
	}
	det := rig.detected(30 * time.Second)
	if det.Spec.Parent.Kind != "Widget" || det.Spec.Parent.Name != rig.f.widget || det.Spec.Request.User != wgControllerUser || len(det.Spec.Changes) == 0 {
		t.Fatalf("Detected report %+v", det.Spec)
	}
	// The record says the receiver has it: the sender is done with the
	// Detected phase, so any second report would already be there.
	eventually(t, 20*time.Second, "the record notes the delivery", func() error {
		recs := rig.records()
		if len(recs) != 1 {
			return fmt.Errorf("%d records", len(recs))
		}
		if !strings.Contains(recs[0].Data["state"], `"Detected"`) {
			return fmt.Errorf("state %s", recs[0].Data["state"])
		}
		return nil
	})
	for range 4 {
		rig.drift(0, "drifted")
		rig.drift(1, "drifted")
	}
	time.Sleep(3 * time.Second) // several sender periods: room for a duplicate to show
	if got := rig.reports(v1alpha1.PhaseDetected); len(got) != 1 {
		t.Fatalf("%d Detected reports for one drift seen by two replicas: %+v", len(got), got)
	}
	senders := 0
	for _, r := range rig.replicas {
		if metricValue(t, r.MetricsURL, "kausality_proxy_driftreports_sender") == "1" {
			senders++
		}
	}
	if senders != 1 {
		t.Errorf("%d replicas send DriftReports, want exactly 1", senders)
	}
}

func TestDriftReportsResolvedFromWatches(t *testing.T) {
	t.Run("an approval added with kubectl", func(t *testing.T) {
		rig := newDriftRig(t, "dr-appr", 1, nil)
		rig.drift(0, "drifted")
		det := rig.detected(30 * time.Second)
		approvals := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":%d,"mode":"once"}]`,
			wgAPIVersion, det.Spec.Parent.Generation)
		k := newKubectl(t, cluster.Direct())
		k.run("", "annotate", "widgets."+framework.TestGroup, rig.f.widget, wgAnnApprovals+"="+approvals)
		rig.resolved(det, v1alpha1.ReasonApproved)
		// No controller write came in between: the once approval is unused.
		if got := rig.f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approvals {
			t.Fatalf("the approval was consumed or changed before the controller wrote: %s", got)
		}
		if v := rig.f.gadgetValue("g"); v == "drifted" {
			t.Fatal("the drift went through")
		}
	})
	t.Run("a spec change of the parent", func(t *testing.T) {
		rig := newDriftRig(t, "dr-spec", 1, nil)
		rig.drift(0, "drifted")
		det := rig.detected(30 * time.Second)
		rig.f.bumpSpec()
		rig.resolved(det, v1alpha1.ReasonParentChanged)
	})
	t.Run("the child deleted", func(t *testing.T) {
		rig := newDriftRig(t, "dr-del", 1, nil)
		rig.drift(0, "drifted")
		det := rig.detected(30 * time.Second)
		err := rig.f.admin.Resource(framework.GadgetGVR).Namespace(rig.f.ns).Delete(context.Background(), "g", metav1.DeleteOptions{})
		mustf(t, err, "deleting Gadget g")
		rig.resolved(det, v1alpha1.ReasonChildDeleted)
		eventually(t, 20*time.Second, "the delivered record is deleted", func() error {
			if n := len(rig.records()); n != 0 {
				return fmt.Errorf("%d records left", n)
			}
			return nil
		})
	})
	t.Run("a newer drift of the pair", func(t *testing.T) {
		rig := newDriftRig(t, "dr-sup", 1, nil)
		rig.drift(0, "first")
		det := rig.detected(30 * time.Second)
		time.Sleep(time.Second) // a later detection time
		rig.drift(0, "second")
		rig.resolved(det, drifts.ReasonSuperseded)
		eventually(t, 20*time.Second, "the newer drift is reported", func() error {
			if n := len(rig.reports(v1alpha1.PhaseDetected)); n != 2 {
				return fmt.Errorf("%d Detected reports", n)
			}
			return nil
		})
	})
}

func TestDriftReportsReachAReceiverThatWasDown(t *testing.T) {
	rig := newDriftRig(t, "dr-down", 1, nil)
	rig.sink.SetDown(true)
	rig.drift(0, "drifted")
	downFor := 30 * time.Second
	deadline := time.Now().Add(downFor)
	eventually(t, downFor, "the sender tries the receiver while it is down", func() error {
		if rig.sink.Refused() == 0 {
			return fmt.Errorf("no attempt yet")
		}
		return nil
	})
	time.Sleep(time.Until(deadline))
	if n := len(rig.sink.All()); n != 0 {
		t.Fatalf("a down receiver got %d reports", n)
	}
	tries := rig.sink.Refused()
	rig.sink.SetDown(false)
	rig.detected(30 * time.Second)
	if tries < 3 {
		t.Errorf("only %d delivery attempts in %s: the sender gave up instead of retrying", tries, downFor)
	}
}

func TestDriftReportsSurviveAProxyRestart(t *testing.T) {
	rig := newDriftRig(t, "dr-restart", 1, nil)
	rig.drift(0, "drifted")
	det := rig.detected(30 * time.Second)
	rig.replicas[0].Stop()
	// While no proxy runs, someone approves the drift.
	rig.f.annotateWidget(map[string]*string{wgAnnApprovals: ptrTo(fmt.Sprintf(
		`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":%d,"mode":"generation"}]`, wgAPIVersion, det.Spec.Parent.Generation))})
	if n := len(rig.reports(v1alpha1.PhaseResolved)); n != 0 {
		t.Fatalf("%d Resolved reports with no proxy running", n)
	}
	rig.start()
	rig.resolved(det, v1alpha1.ReasonApproved)
}

func TestDriftReportsHonourSnooze(t *testing.T) {
	slack := newFakeSlack(t)
	rig := newDriftRig(t, "dr-snooze", 1, func(o *framework.ReplicaOptions) { slack.configure(t, &o.Drifts) })
	rig.f.annotateWidget(map[string]*string{wgAnnSnooze: ptrTo(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))})
	rig.f.settleGadget("g", "Deny/DriftUnapproved")
	// Still denied in enforce mode.
	rig.drift(0, "drifted")
	// A drift of another Widget through the same replica is reported and
	// escalated: the pipeline is live while the snoozed one stays quiet.
	other := newWGFamily(t, "dr-awake", "enforce")
	_, err := other.createGadget("g", "v1", false)
	mustf(t, err, "creating the other Gadget")
	other.initialize()
	_, err = other.writeGadget(wgNewActor(t, rig.replicas[0].Through(other.ctrl.cfg), wgControllerUser), "g", false,
		func(g *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(g.Object, "drifted", "spec", "value")
		})
	wgDenied(t, err, other, "Gadget", "g", wgAnnApprovals)
	eventually(t, 30*time.Second, "the other drift is reported and escalated", func() error {
		if len(rig.sink.For(other.ns, "g")) == 0 {
			return fmt.Errorf("not reported")
		}
		if len(slack.posted()) == 0 {
			return fmt.Errorf("not escalated")
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	if got := rig.sink.For(rig.f.ns, "g"); len(got) != 0 {
		t.Errorf("a snoozed parent's drift was reported: %+v", got)
	}
	for _, m := range slack.posted() {
		if strings.Contains(m.text, rig.f.widget) {
			t.Errorf("a snoozed parent's drift was escalated: %s", m.text)
		}
	}
}

func ptrTo(s string) *string { return &s }

// kube-controller-manager's deployment controller drifts a ReplicaSet
// through the main proxy while a second replica shares its records, Lease
// and receiver, as two replicas of a Deployment do: the drift is reported
// once, and an approval added with kubectl resolves it under the same id.
func TestDriftReportsWithControllerManager(t *testing.T) {
	ctx := context.Background()
	peer, err := env.StartReplica(ctx, framework.ReplicaOptions{Receivers: []string{env.Reports.URL()},
		Drifts: framework.DriftTimings(framework.DriftNamespace)})
	mustf(t, err, "starting a second replica next to the main proxy")
	t.Cleanup(peer.Stop)

	ns := namespaceWithMode(t, "dr-kcm", "enforce")
	aliceCfg, err := cluster.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "alice")
	alice := clientFor(t, aliceCfg)
	_, rsName := stableDeployment(t, alice, ns, "web")
	bobCfg, err := cluster.UserThroughProxy("bob", "system:masters")
	mustf(t, err, "bob")
	_, err = clientFor(t, peer.Through(bobCfg)).AppsV1().ReplicaSets(ns).UpdateScale(ctx, rsName,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: rsName, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 2}}, metav1.UpdateOptions{})
	mustf(t, err, "bob scales the ReplicaSet through the second replica")

	detected := func() []v1alpha1.DriftReport {
		var out []v1alpha1.DriftReport
		for _, r := range env.Reports.For(ns, rsName) {
			if r.Spec.Phase == v1alpha1.PhaseDetected {
				out = append(out, r)
			}
		}
		return out
	}
	eventually(t, 60*time.Second, "the deployment controller's revert is reported", func() error {
		if len(detected()) == 0 {
			return fmt.Errorf("no Detected report yet")
		}
		return nil
	})
	// The controller keeps retrying; the drift stays one report.
	eventually(t, 60*time.Second, "more denied retries of the controller", func() error {
		if n := countDecisions(decisionsFor(t, "replicasets", ns, rsName), deploymentController, "Deny", "DriftUnapproved"); n < 3 {
			return fmt.Errorf("%d denials", n)
		}
		return nil
	})
	det := detected()
	if len(det) != 1 || det[0].Spec.Request.User != deploymentController || det[0].Spec.Parent.Kind != "Deployment" {
		t.Fatalf("Detected reports %+v, want one by %s", det, deploymentController)
	}
	senders := 0
	for _, url := range []string{env.MetricsURL, peer.MetricsURL} {
		if metricValue(t, url, "kausality_proxy_driftreports_sender") == "1" {
			senders++
		}
	}
	if senders != 1 {
		t.Errorf("%d of the two replicas send DriftReports, want 1", senders)
	}

	d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "the Deployment")
	approval := fmt.Sprintf(`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":%q,"generation":%d,"mode":"generation"}]`, rsName, d.Generation)
	newKubectl(t, cluster.Direct()).run("", "-n", ns, "annotate", "deployment", "web", "kausality.io/approvals="+approval)
	eventually(t, 30*time.Second, "the approval resolves the drift under its id", func() error {
		for _, r := range env.Reports.For(ns, rsName) {
			if r.Spec.Phase == v1alpha1.PhaseResolved {
				if r.Spec.ID != det[0].Spec.ID || r.Spec.Reason != v1alpha1.ReasonApproved {
					return fmt.Errorf("Resolved %+v", r.Spec)
				}
				return nil
			}
		}
		return fmt.Errorf("no Resolved report yet")
	})
}
