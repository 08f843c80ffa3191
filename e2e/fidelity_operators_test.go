//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// The operator rows of docs/fidelity.md: the in-test operators of
// conditions_only_test.go and memcached_test.go, writing through the proxy
// with their own service account, through create, a person's spec change
// and a person's edit of their child. They are scripted rather than
// reconciling in a loop, so the revert of an injected drift is attempted a
// fixed number of times instead of by the operator's retries.

// operatorReverts is how often a scripted operator tries to revert an
// injected drift: each attempt must be denied.
const operatorReverts = 3

// waitWidgetInitialized waits until the proxy has persisted the Widget's
// initialized phase.
func (f *wgFamily) waitWidgetInitialized() {
	f.t.Helper()
	eventually(f.t, 60*time.Second, "the Widget is initialized", func() error {
		if got := f.getWidget().GetAnnotations()[wgAnnPhase]; got != "initialized" {
			return fmt.Errorf("%s = %q", wgAnnPhase, got)
		}
		return nil
	})
}

// scriptedDrift records d, lets inject make the person's change, then has
// the operator try revert operatorReverts times a second apart: every
// attempt must be a 403 for unapproved drift, logged as Deny
// DriftUnapproved, and held must find the person's change standing after
// each.
func (w *workload) scriptedDrift(t *testing.T, d *injectedDrift, inject func(), revert, held func() error) {
	t.Helper()
	d.mark = decisionMark(t)
	w.drifts = append(w.drifts, d)
	inject()
	for i := 0; i < operatorReverts; i++ {
		if err := revert(); !denied(err) {
			t.Fatalf("%s: the operator's revert %d of %s: %v, want a 403 for unapproved drift", w.kind, i+1, d.what, err)
		}
		if err := held(); err != nil {
			t.Fatalf("%s: %s was reverted: %v", w.kind, d.what, err)
		}
		time.Sleep(time.Second)
	}
	eventually(t, 30*time.Second, w.kind+": the operator's reverts are logged as Deny DriftUnapproved", func() error {
		all, err := cluster.Decisions()
		if err != nil {
			return err
		}
		n := 0
		for i, l := range all {
			if l.Str("namespace") == w.ns && d.covers(i, l) && l.Str("decision") == "Deny" && l.Str("category") == "DriftUnapproved" {
				n++
			}
		}
		if n < operatorReverts {
			return fmt.Errorf("%d of %d reverts logged", n, operatorReverts)
		}
		return nil
	})
	d.caught = true
}

// runConditionsOnlyOperator: a Widget whose operator reports its observed
// generation only in the Ready condition (conditions[].observedGeneration,
// no status.observedGeneration), with a Gadget as its child.
func runConditionsOnlyOperator(t *testing.T, c *fidelityCase) {
	w := c.workload
	f := newWGFamily(t, "fidelity-condonly", "enforce")
	w.ns, c.widget = f.ns, f.widget
	w.step(t, "the operator creates its Gadget and reports Ready with the Widget's generation in the condition", func() {
		_, err := f.createGadget("g", "a", false)
		mustf(t, err, "the operator creates its Gadget")
		f.setReadyCondition(f.getWidget().GetGeneration())
		f.waitWidgetInitialized()
		f.settleGadget("g", "Deny/DriftUnapproved")
	})
	w.step(t, "a person changes the Widget's spec; the operator updates its Gadget while Ready still names the previous generation, then reports Ready for the new one", func() {
		generation := f.bumpSpec()
		f.settleGadget("g", "Allow/Expected")
		_, err := f.setValue("g", "b", false)
		mustf(t, err, "the operator carries out the spec change on its Gadget")
		f.setReadyCondition(generation)
		f.settleGadget("g", "Deny/DriftUnapproved")
	})
	w.requireNoOperatorFalseDenials(t, "life cycle")
	w.settled = true
	w.step(t, "drift: a person edits the Gadget, the operator's reverts are denied", func() {
		d := &injectedDrift{what: "a person's edit of Gadget g", controller: f.ctrl.user, resource: "gadgets", name: "g"}
		w.scriptedDrift(t, d, func() {
			_, err := f.writeGadget(f.alice, "g", false, func(g *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(g.Object, "person", "spec", "value")
			})
			mustf(t, err, "a person edits the Gadget")
		}, func() error {
			_, err := f.setValue("g", "b", false)
			return err
		}, func() error {
			if got := f.gadgetValue("g"); got != "person" {
				return fmt.Errorf("Gadget g holds %q", got)
			}
			return nil
		})
	})
}

// runAvailableOnlyOperator: the operator-sdk memcached pattern, a Widget
// (spec.size) whose operator reports only an Available condition and no
// observed generation anywhere, and owns a real Deployment that
// kube-controller-manager rolls out through the proxy.
func runAvailableOnlyOperator(t *testing.T, c *fidelityCase) {
	w := c.workload
	f := c.memcachedFamily(t, "fidelity-memcached")
	size := f.widgetSize
	w.step(t, "the operator reports Available Unknown, creates its Deployment, then reports Available True", func() {
		f.setAvailable("Unknown")
		w.createOperatorDeployment(t, f)
		f.setAvailable("True")
		f.waitWidgetInitialized()
		f.settleReconcile(size()+1, "Deny/DriftUnapproved")
	})
	for i := 0; i < 2; i++ {
		w.step(t, fmt.Sprintf("a person changes spec.size to %d; the operator scales its Deployment, then reports Available True", size()+1), func() {
			f.bumpSpec()
			f.settleReconcile(size(), "Allow/Expected")
			mustf(t, f.reconcileSize(size(), false), "the operator scales its Deployment to %d", size())
			w.waitOperatorDeployment(t, f, size())
			f.setAvailable("True")
			f.settleReconcile(size()+1, "Deny/DriftUnapproved")
		})
	}
	w.requireNoOperatorFalseDenials(t, "life cycle")
	w.settled = true
	w.step(t, "drift: a person scales the operator's Deployment, the operator's reverts are denied", func() {
		w.personScalesOperatorDeployment(t, f)
	})
}

// runPatchedAvailableOperator: the memcached pattern with its status
// written as controller-runtime's Status().Patch with client.MergeFrom
// writes it, a merge patch that names no resourceVersion. The proxy
// credits such a patch with the generation it landed on only after
// --unbound-status-record-delay (the suite runs with the default), so
// each step waits for the record before the operator's reverts are drift
// again. After each of a person's spec changes, the patch of the status
// the operator computed before the change lands first: it must not
// settle the Widget at the new spec, or the operator's scale that carries
// the change out would be refused.
func runPatchedAvailableOperator(t *testing.T, c *fidelityCase) {
	w := c.workload
	f := c.memcachedFamily(t, "fidelity-patched")
	size := f.widgetSize
	w.step(t, "the operator patches Available Unknown, creates its Deployment, then patches Available True", func() {
		f.patchAvailable("Unknown")
		w.createOperatorDeployment(t, f)
		f.patchAvailable("True")
		f.waitRecorded(f.getWidget().GetGeneration(), "the Widget's patched status is credited with its generation")
		f.settleReconcile(size()+1, "Deny/DriftUnapproved")
	})
	for i := 0; i < 2; i++ {
		w.step(t, fmt.Sprintf("a person changes spec.size to %d; the operator's stale status patch lands, then it scales its Deployment and patches Available True", size()+1), func() {
			generation := f.bumpSpec()
			f.patchAvailable("True")
			f.settleReconcile(size(), "Allow/Expected")
			mustf(t, f.reconcileSize(size(), false), "the operator scales its Deployment to %d after its stale status patch", size())
			w.waitOperatorDeployment(t, f, size())
			f.patchAvailable("True")
			f.waitRecorded(generation, "the Widget's patched status is credited with the new generation")
			f.settleReconcile(size()+1, "Deny/DriftUnapproved")
		})
	}
	w.requireNoOperatorFalseDenials(t, "life cycle")
	w.settled = true
	w.step(t, "drift: a person scales the operator's Deployment, the operator's reverts are denied", func() {
		w.personScalesOperatorDeployment(t, f)
	})
}

// memcachedFamily is the Widget of a memcached row, in an enforce-mode
// namespace of its own whose pods are marked ready.
func (c *fidelityCase) memcachedFamily(t *testing.T, prefix string) *wgFamily {
	t.Helper()
	f := newWGFamily(t, prefix, "enforce")
	c.ns, c.widget = f.ns, f.widget
	readyPods(t, f.ns)
	return f
}

// createOperatorDeployment has the operator create its Deployment at the
// Widget's size, and waits until kube-controller-manager rolled it out.
func (w *workload) createOperatorDeployment(t *testing.T, f *wgFamily) {
	t.Helper()
	_, err := f.ctrl.kube.AppsV1().Deployments(f.ns).Create(context.Background(), f.memcachedDeployment(f.widgetSize()), metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the operator creates its Deployment")
	w.waitOperatorDeployment(t, f, f.widgetSize())
}

// personScalesOperatorDeployment injects the memcached rows' drift: a
// person scales the operator's Deployment, and each of the operator's
// reverts is denied while the person's size stands.
func (w *workload) personScalesOperatorDeployment(t *testing.T, f *wgFamily) {
	t.Helper()
	ctx := context.Background()
	want := f.widgetSize()
	d := &injectedDrift{what: "a person's scale of the operator's Deployment", controller: f.ctrl.user, resource: "deployments", name: f.widget}
	w.scriptedDrift(t, d, func() {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			dep, err := f.alice.kube.AppsV1().Deployments(f.ns).Get(ctx, f.widget, metav1.GetOptions{})
			if err != nil {
				return err
			}
			dep.Spec.Replicas = ptr.To(want + 2)
			_, err = f.alice.kube.AppsV1().Deployments(f.ns).Update(ctx, dep, metav1.UpdateOptions{})
			return err
		})
		mustf(t, err, "a person scales the operator's Deployment")
	}, func() error {
		return f.reconcileSize(want, false)
	}, func() error {
		dep, err := w.admin.AppsV1().Deployments(f.ns).Get(ctx, f.widget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *dep.Spec.Replicas != want+2 {
			return fmt.Errorf("replicas %d", *dep.Spec.Replicas)
		}
		return nil
	})
	w.waitOperatorDeployment(t, f, want+2)
}

// waitOperatorDeployment waits until kube-controller-manager has rolled
// the operator's Deployment out at replicas.
func (w *workload) waitOperatorDeployment(t *testing.T, f *wgFamily, replicas int32) {
	t.Helper()
	eventually(t, 120*time.Second, fmt.Sprintf("the operator's Deployment rolled out at %d", replicas), func() error {
		d, err := w.admin.AppsV1().Deployments(f.ns).Get(context.Background(), f.widget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return deploymentRolledOut(d, replicas, "registry.invalid/memcached:1.6")
	})
}

// requireNoOperatorFalseDenials is requireNoFalseDenials without the dry-run
// probes the scripted operators send to wait for the proxy's cache: they
// are the test's, not the operator's.
func (w *workload) requireNoOperatorFalseDenials(t *testing.T, phase string) {
	t.Helper()
	all, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	if bad := fidelityFalseDenials(w, all); len(bad) > 0 {
		t.Fatalf("%s, %s: %d false denials:\n%s", w.kind, phase, len(bad), formatLines(bad))
	}
}
