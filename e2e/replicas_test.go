//go:build !kind

package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/intercept/settlements"
)

// replicaPeer starts an extra proxy replica on the shared control plane
// and stops it with the test.
func replicaPeer(t *testing.T, name string) *framework.Replica {
	t.Helper()
	r, err := env.StartReplica(context.Background(), framework.ReplicaOptions{
		Name:      name + "-" + utilrand.String(5),
		Receivers: []string{env.Reports.URL()},
		Drifts:    framework.DriftTimings(framework.DriftNamespace),
	})
	mustf(t, err, "proxy replica %s", name)
	t.Cleanup(r.Stop)
	return r
}

// restartReplica stops r and starts a new process in its place: it knows
// only what the cluster records.
func restartReplica(t *testing.T, r *framework.Replica, name string) *framework.Replica {
	t.Helper()
	r.Stop()
	return replicaPeer(t, name)
}

// via is actor a talking to replica r instead of the main proxy.
func (a *wgActor) via(t *testing.T, r *framework.Replica) *wgActor {
	t.Helper()
	return wgNewActor(t, r.Through(a.cfg), a.user)
}

// waitSettledRecord waits until the cluster records parent uid, in the
// parents' namespace ns, as settled (at spec hash at, unless empty).
func waitSettledRecord(t *testing.T, ns string, uid types.UID, at string) settle.Record {
	t.Helper()
	var rec settle.Record
	eventually(t, 60*time.Second, "the cluster records the parent settled", func() error {
		cm, err := directClient(t).CoreV1().ConfigMaps(framework.DriftNamespace).Get(context.Background(), settlements.Name(ns), metav1.GetOptions{})
		if err != nil {
			return err
		}
		data, ok := cm.Data[string(uid)]
		if !ok {
			return fmt.Errorf("no record of %s in %d", uid, len(cm.Data))
		}
		if rec, err = settle.DecodeRecord(data); err != nil {
			return err
		}
		if rec.Settled == "" || at != "" && rec.Settled != at {
			return fmt.Errorf("record %+v, want settled at %q", rec, at)
		}
		return nil
	})
	return rec
}

// widgetStatusVia is the controller writing the Widget's status through
// actor a: observedGeneration = generation, and Ready as given.
func (f *wgFamily) widgetStatusVia(a *wgActor, ready bool) {
	f.t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		w, err := a.dyn.Resource(framework.WidgetGVR).Get(ctx, f.widget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		status := "False"
		if ready {
			status = "True"
		}
		w.Object["status"] = map[string]any{
			"observedGeneration": w.GetGeneration(),
			"conditions": []any{map[string]any{
				"type": "Ready", "status": status, "reason": "Scripted",
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			}},
		}
		_, err = a.dyn.Resource(framework.WidgetGVR).UpdateStatus(ctx, w, metav1.UpdateOptions{FieldManager: wgManager})
		return err
	})
	mustf(f.t, err, "the controller writes the Widget's status (ready=%v)", ready)
}

// revertVia is the controller setting Gadget g's value through actor a.
func (f *wgFamily) revertVia(a *wgActor, value string) error {
	_, err := f.writeGadget(a, "g", false, func(g *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(g.Object, value, "spec", "value")
	})
	return err
}

// denied says whether err is the proxy's 403 for unapproved drift.
func denied(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Code != 403 || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Type == "KausalityUnapproved" {
			return true
		}
	}
	return false
}

// Two replicas behind one Service, and one of them restarted: a parent that
// settled is settled on every replica. The operator reports Ready=False
// after a person's edit of its child (it is not Current now), so only what
// was recorded when it settled tells its revert from a spec change being
// carried out; a replica that did not see it settle would be lenient.
func TestReplicasDenyTheSameRevert(t *testing.T) {
	a := replicaPeer(t, "revert-a")
	b := replicaPeer(t, "revert-b")
	f := newWGFamily(t, "replicas-revert", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates Gadget g")
	f.initialize() // settled at its spec, learned by the main proxy
	waitSettledRecord(t, "", f.uid, "")

	_, err = f.writeGadget(f.alice, "g", false, func(g *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(g.Object, "person", "spec", "value")
	})
	mustf(t, err, "alice edits Gadget g")
	f.widgetStatusVia(f.ctrl.via(t, a), false)

	revertDenied := func(r *framework.Replica, which string) {
		t.Helper()
		if err := f.revertVia(f.ctrl.via(t, r), "a"); !denied(err) {
			t.Fatalf("the controller's revert through %s: %v, want a 403 for unapproved drift", which, err)
		}
		if got := f.gadgetValue("g"); got != "person" {
			t.Fatalf("after the revert through %s, Gadget g holds %q, want alice's value", which, got)
		}
	}
	revertDenied(a, "replica a")
	revertDenied(b, "replica b")

	a = restartReplica(t, a, "revert-a-restarted")
	revertDenied(a, "replica a, restarted")
	revertDenied(b, "replica b")
	if _, err := f.setValue("g", "a", false); !denied(err) {
		t.Fatalf("the controller's revert through the main proxy: %v, want a 403", err)
	}

	// A spec change, seen first by one replica, is carried out through
	// either: no new 403.
	f.bumpSpec()
	f.widgetStatusVia(f.ctrl.via(t, b), false)
	for _, r := range []*framework.Replica{a, b} {
		eventually(t, 30*time.Second, "the controller carries out the spec change through "+r.Name, func() error {
			return f.revertVia(f.ctrl.via(t, r), "rolled-"+r.Name)
		})
	}
	// Settled again, learned from a status write one replica forwarded;
	// after a flap to Ready=False, the other replica holds the next drift.
	f.widgetStatusVia(f.ctrl.via(t, a), true)
	waitSettledRecord(t, "", f.uid, settle.SpecHash(f.getWidget()))
	f.widgetStatusVia(f.ctrl.via(t, a), false)
	eventually(t, 30*time.Second, "the drift after the new settlement is held through replica b", func() error {
		if err := f.revertVia(f.ctrl.via(t, b), "drift"); !denied(err) {
			return fmt.Errorf("the controller's write through replica b: %v, want a 403", err)
		}
		return nil
	})
}

// A generation approval written for the Deployment's generation G, on a
// kind that bumps its generation when its annotations change, still admits
// its write after a replica restarts and on the replica that never saw G:
// the window it names starts where the cluster recorded the spec first,
// not where a replica first saw the Deployment.
func TestReplicasHonourAGenerationApprovalAfterARestart(t *testing.T) {
	a := replicaPeer(t, "approval-a")
	b := replicaPeer(t, "approval-b")
	ctx := context.Background()
	ns := namespaceWithMode(t, "replicas-approval", "enforce")
	aliceCfg, err := cluster.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "alice")
	alice := clientFor(t, aliceCfg)
	d, rsName := stableDeployment(t, alice, ns, "web")
	waitSettledRecord(t, ns, d.UID, "")
	bobCfg, err := cluster.UserThroughProxy("bob", "system:masters")
	mustf(t, err, "bob")
	bob := clientFor(t, bobCfg)
	ctrlCfg, err := cluster.ServiceAccountThroughProxy(ctx, "kube-system", "deployment-controller")
	mustf(t, err, "the deployment controller's service account")

	scaleRS := func(c kubernetes.Interface, replicas int32) (*appsv1.ReplicaSet, error) {
		var out *appsv1.ReplicaSet
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			rs, err := directClient(t).AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			rs.Spec.Replicas = &replicas
			out, err = c.AppsV1().ReplicaSets(ns).Update(ctx, rs, metav1.UpdateOptions{})
			return err
		})
		return out, err
	}
	_, err = scaleRS(bob, 2)
	mustf(t, err, "bob scales the ReplicaSet")
	eventually(t, 60*time.Second, "the deployment controller's revert is denied", func() error {
		if countDecisions(decisionsFor(t, "replicasets", ns, rsName), deploymentController, "Deny", "DriftUnapproved") == 0 {
			return fmt.Errorf("no denied drift yet")
		}
		return nil
	})
	current, err := directClient(t).AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get the Deployment")
	approval := fmt.Sprintf(`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":%q,"generation":%d,"mode":"generation"}]`, rsName, current.Generation)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, wgAnnApprovals, approval)
	_, err = alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	mustf(t, err, "alice approves the revert for generation %d", current.Generation)
	after, err := directClient(t).AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get the Deployment")
	if after.Generation <= current.Generation {
		t.Fatalf("the approval did not bump the Deployment's generation (%d → %d): the test shows nothing", current.Generation, after.Generation)
	}

	a = restartReplica(t, a, "approval-a-restarted")
	for _, r := range []*framework.Replica{a, b} {
		ctrl := clientFor(t, r.Through(ctrlCfg))
		// kube-controller-manager reverts through the main proxy too, so a
		// revert through r may find the ReplicaSet changed (409): bob
		// scales again and the revert is tried again.
		eventually(t, 60*time.Second, "the approved revert passes through "+r.Name, func() error {
			scaled, err := scaleRS(bob, 2)
			if err != nil {
				return err
			}
			revert := scaled.DeepCopy()
			revert.Spec.Replicas = new(int32)
			_, err = ctrl.AppsV1().ReplicaSets(ns).Update(ctx, revert, metav1.UpdateOptions{})
			if denied(err) {
				t.Fatalf("the approved revert through %s was denied: %v", r.Name, err)
			}
			return err
		})
	}
	if got := onlyDeploymentApprovals(t, ns); got != approval {
		t.Fatalf("the approval changed to %q: a replica pruned it as stale", got)
	}
}

// onlyDeploymentApprovals is the approvals annotation of Deployment web.
func onlyDeploymentApprovals(t *testing.T, ns string) string {
	t.Helper()
	d, err := directClient(t).AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
	mustf(t, err, "get the Deployment")
	return d.Annotations[wgAnnApprovals]
}
