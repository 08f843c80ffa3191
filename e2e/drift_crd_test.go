package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// TestDriftCustomResources runs the drift semantics on a cluster-scoped
// custom resource parent (Widget) and a namespaced custom resource child
// (Gadget) with a scripted controller, so every decision is deterministic.
func TestDriftCustomResources(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"initialization", crdInitialization},
		{"expected then drift", crdExpectedThenDrift},
		{"log mode", crdLogMode},
		{"approvals", crdApprovals},
		{"freeze", crdFreeze},
		{"snooze", crdSnooze},
		{"deletion cleanup", crdDeletionCleanup},
		{"once approval is used exactly once", crdOnceApprovalIsUsedExactlyOnce},
		{"malformed annotations", crdMalformedAnnotations},
		{"mode comes from stored state", crdModeComesFromStoredState},
	} {
		t.Run(c.name, c.run)
	}
}

func crdInitialization(t *testing.T) {
	f := newWGFamily(t, "wg-init", "enforce")

	mark := wgMark(t)
	_, err := f.createGadget("g", "v1", false)
	mustf(t, err, "the controller creates a Gadget while its Widget initializes")
	d := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Allow", "ParentInitializing")
	wgExpectField(t, d, "lifecyclePhase", "Initializing")

	mark = wgMark(t)
	_, err = f.setValue("g", "v2", false)
	mustf(t, err, "the controller changes the Gadget while its Widget initializes")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "ParentInitializing")
	if w := f.getWidget(); w.GetAnnotations()[wgAnnPhase] != "" {
		t.Fatalf("phase persisted before the Widget was ready: %q", w.GetAnnotations()[wgAnnPhase])
	}

	mark = wgMark(t)
	f.initialize()
	d = wgDecision(t, mark, "widgets", "", f.widget)
	wgExpectDecision(t, d, "Allow", "StatusWrite")
	wgExpectField(t, d, "subresource", "status")

	// The proxy wrote the phase itself, after the status write, as its
	// own field manager.
	owner := ""
	for _, mf := range f.getWidget().GetManagedFields() {
		if mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), `"f:kausality.io/phase"`) {
			owner = mf.Manager
		}
	}
	if owner != "kausality-proxy" {
		t.Errorf("kausality.io/phase is owned by %q, want the proxy's field manager kausality-proxy", owner)
	}

	// Ready flaps to False: the high-water mark keeps it initialized.
	f.setStatus(false)
	if got := f.getWidget().GetAnnotations()[wgAnnPhase]; got != "initialized" {
		t.Fatalf("%s = %q after Ready=False", wgAnnPhase, got)
	}
	f.settleGadget("g", "Deny/DriftUnapproved")
	mark = wgMark(t)
	_, err = f.setValue("g", "v3", false)
	wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
	d = wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Deny", "DriftUnapproved")
	wgExpectField(t, d, "lifecyclePhase", "Initialized")
	if v := f.gadgetValue("g"); v != "v2" {
		t.Fatalf("the denied write changed the Gadget: %q", v)
	}
	if got := f.getWidget().GetAnnotations()[wgAnnPhase]; got != "initialized" {
		t.Fatalf("%s = %q at the end", wgAnnPhase, got)
	}
}

func crdExpectedThenDrift(t *testing.T) {
	f := newWGFamily(t, "wg-exp", "enforce")
	f.initialize()
	gen := f.bumpSpec()

	mark := wgMark(t)
	g, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates a Gadget for the changed Widget (expected)")
	d := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Allow", "Expected")
	wgExpectField(t, d, "isController", true)
	// The scripted controller writes its status through the proxy, so
	// the proxy has recorded its user as the Widget's controller.
	wgExpectField(t, d, "controllerMethod", "statusWriters")
	wgExpectField(t, d, "parentGeneration", int(gen))
	wgExpectField(t, d, "parentObservedGeneration", int(gen-1))
	hops := traceOf(t, g)
	if len(hops) != 2 {
		t.Fatalf("the created Gadget's trace has %d hops, want 2: %+v", len(hops), hops)
	}
	wgExpectHop(t, hops[0], "Widget", f.widget, gen, "alice")
	wgExpectHop(t, hops[1], "Gadget", "g", 1, wgControllerUser)

	// An expected update: the trace is replaced, two hops again.
	mark = wgMark(t)
	g, err = f.setValue("g", "b", false)
	mustf(t, err, "the controller updates the Gadget while the Widget reconciles")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "Expected")
	hops = traceOf(t, g)
	if len(hops) != 2 {
		t.Fatalf("the updated Gadget's trace has %d hops, want 2: %+v", len(hops), hops)
	}
	wgExpectHop(t, hops[0], "Widget", f.widget, gen, "alice")
	wgExpectHop(t, hops[1], "Gadget", "g", g.GetGeneration(), wgControllerUser)

	// The controller catches up: the next change is drift.
	f.setStatus(true)
	f.settleGadget("g", "Deny/DriftUnapproved")
	mark = wgMark(t)
	_, err = f.setValue("g", "drifted", false)
	s := wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
	if !strings.Contains(s.Message, "spec.value") || !strings.Contains(s.Message, `"b"`) || !strings.Contains(s.Message, `"drifted"`) {
		t.Errorf("the denial does not show spec.value \"b\" → \"drifted\": %s", s.Message)
	}
	if c, ok := wgCause(s, "KausalityChangedField"); !ok || c.Field != "spec.value" {
		t.Errorf("no changed-field cause for spec.value: %+v", s.Details.Causes)
	}
	if c, ok := wgCause(s, "KausalityController"); !ok || !strings.Contains(c.Message, wgManager) {
		t.Errorf("no controller cause naming %s: %+v", wgManager, s.Details.Causes)
	}
	c, _ := wgCause(s, "KausalityUnblock")
	sugg := wgApprovals(t, c.Message)
	if len(sugg) != 1 || sugg[0]["kind"] != "Gadget" || sugg[0]["name"] != "g" || sugg[0]["apiVersion"] != wgAPIVersion ||
		sugg[0]["generation"] != float64(gen) || sugg[0]["mode"] != "once" {
		t.Errorf("the suggested approval %q is not a once approval of Gadget g at generation %d", c.Message, gen)
	}
	d = wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Deny", "DriftUnapproved")
	wgExpectField(t, d, "mode", "enforce")
	wgExpectField(t, d, "modeSource", "namespace")
	wgExpectField(t, d, "drift", true)
	wgExpectField(t, d, "snoozed", false)
	if v := f.gadgetValue("g"); v != "b" {
		t.Fatalf("the denied write changed the Gadget: %q", v)
	}
}

func crdLogMode(t *testing.T) {
	f := newInitializedGadgetFamily(t, "wg-log", "log")
	f.settleGadget("g", "Allow/DriftUnapproved")

	f.ctrl.warnings.take()
	mark := wgMark(t)
	g, err := f.setValue("g", "drifted", false)
	mustf(t, err, "a drift write in log mode must go through")
	warnings := f.ctrl.warnings.take()
	if !wgSomeContainsAll(warnings, "drift", "Gadget "+f.ns+"/g", "Widget "+f.widget, wgAnnApprovals) {
		t.Errorf("no Warning naming the drift of Gadget %s/g under Widget %s: %q", f.ns, f.widget, warnings)
	}
	d := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Allow", "DriftUnapproved")
	wgExpectField(t, d, "mode", "log")
	wgExpectField(t, d, "modeSource", "namespace")
	if v := f.gadgetValue("g"); v != "drifted" {
		t.Fatalf("the Gadget has %q", v)
	}
	// Unapproved drift starts a new causal chain at the child.
	hops := traceOf(t, g)
	if len(hops) != 1 {
		t.Fatalf("trace after drift in log mode: %+v, want one origin hop", hops)
	}
	wgExpectHop(t, hops[0], "Gadget", "g", g.GetGeneration(), wgControllerUser)
}

func crdApprovals(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		f := newInitializedGadgetFamily(t, "wg-once", "enforce")
		f.settleGadget("g", "Deny/DriftUnapproved")
		_, err := f.setValue("g", "b", false)
		s := wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		// Do what the denial says.
		c, _ := wgCause(s, "KausalityUnblock")
		f.annotateWidget(map[string]*string{wgAnnApprovals: &c.Message})

		mark := wgMark(t)
		g, err := f.setValue("g", "b", false)
		mustf(t, err, "the write the once approval allows")
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "DriftApproved")
		wgExpectField(t, d, "approvalMode", "once")
		wgExpectField(t, d, "approval", "Gadget/g")
		if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
			t.Errorf("the once approval was not removed from the Widget: %q", v)
		}
		hops := traceOf(t, g)
		if len(hops) != 2 {
			t.Fatalf("trace after approved drift: %+v, want the Widget's hop then the Gadget's", hops)
		}
		wgExpectHop(t, hops[0], "Widget", f.widget, 1, "alice")
		wgExpectHop(t, hops[1], "Gadget", "g", g.GetGeneration(), wgControllerUser)

		mark = wgMark(t)
		_, err = f.setValue("g", "c", false)
		wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")
		if v := f.gadgetValue("g"); v != "b" {
			t.Fatalf("the Gadget has %q, want b", v)
		}
	})

	t.Run("once is never taken for a write the upstream refuses", func(t *testing.T) {
		f := newOnceApprovedGadget(t, "wg-restore")
		f.settleGadget("g", "Allow/DriftApproved")

		// The controller writes from a stale read: kube-apiserver
		// refuses it with 409. The proxy learns that before it touches
		// the approval, so the parent is not written at all: its
		// resourceVersion does not move. Decided on a live read, which
		// shows a newer version, it answers the 409 itself ("conflict");
		// decided on its copy of the version the write names, it learns
		// it from the dry run before the reservation ("dry-run-refused").
		stale, err := f.gadgets(f.ctrl).Get(context.Background(), "g", metav1.GetOptions{})
		mustf(t, err, "get")
		_, err = f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Patch(context.Background(), "g", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
		mustf(t, err, "moving the Gadget's resourceVersion on")
		_ = unstructured.SetNestedField(stale.Object, "b", "spec", "value")
		widgetRV := f.getWidget().GetResourceVersion()
		mark := wgMark(t)
		_, err = f.gadgets(f.ctrl).Update(context.Background(), stale, metav1.UpdateOptions{FieldManager: wgManager})
		if !apierrors.IsConflict(err) {
			t.Fatalf("the stale update: %v, want kube-apiserver's 409", err)
		}
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "DriftApproved")
		if o := d.Str("outcome"); o != "conflict" && o != "dry-run-refused" {
			t.Errorf("decision line outcome %q, want conflict or dry-run-refused", o)
		}
		widget := f.getWidget()
		if widget.GetResourceVersion() != widgetRV {
			t.Errorf("the Widget was written for a refused write: resourceVersion %s, was %s", widget.GetResourceVersion(), widgetRV)
		}
		got := wgApprovals(t, widget.GetAnnotations()[wgAnnApprovals])
		if len(got) != 1 || got[0]["name"] != "g" || got[0]["mode"] != "once" || got[0]["generation"] != float64(1) {
			t.Fatalf("approvals %v", got)
		}

		// And the next write can use it.
		mark = wgMark(t)
		_, err = f.setValue("g", "c", false)
		mustf(t, err, "the write with the restored approval")
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "DriftApproved")
		if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
			t.Errorf("the once approval is still there: %q", v)
		}
		if v := f.gadgetValue("g"); v != "c" {
			t.Fatalf("Gadget value %q", v)
		}
	})

	t.Run("generation", func(t *testing.T) {
		f := newInitializedGadgetFamily(t, "wg-gen", "enforce")
		approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":1,"mode":"generation"}]`, wgAPIVersion)
		f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
		f.settleGadget("g", "Allow/DriftApproved")
		for _, v := range []string{"b", "c"} {
			mark := wgMark(t)
			_, err := f.setValue("g", v, false)
			mustf(t, err, "drift write %s under a generation approval", v)
			d := wgDecision(t, mark, "gadgets", f.ns, "g")
			wgExpectDecision(t, d, "Allow", "DriftApproved")
			wgExpectField(t, d, "approvalMode", "generation")
			if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
				t.Fatalf("the generation approval changed: %q", got)
			}
		}

		// The Widget moves on to generation 2 and the controller catches
		// up: the approval for generation 1 no longer applies.
		f.bumpSpec()
		f.setStatus(true)
		f.settleGadget("g", "Deny/DriftUnapproved")
		mark := wgMark(t)
		_, err := f.setValue("g", "d", false)
		s := wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		if c, ok := wgCause(s, "KausalityUnapproved"); !ok || !strings.Contains(c.Message, "generation 2") {
			t.Errorf("the denial should say there is no approval at generation 2: %+v", s.Details.Causes)
		}
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")

		// The next expected write prunes the stale approval; the dry-run
		// probes of that write do not.
		f.bumpSpec()
		f.settleGadget("g", "Allow/Expected")
		if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
			t.Fatalf("a dry-run pruned the approvals: %q", got)
		}
		_, err = f.setValue("g", "e", false)
		mustf(t, err, "expected write")
		eventually(t, 15*time.Second, "the stale generation approval is pruned", func() error {
			if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
				return fmt.Errorf("approvals still %q", v)
			}
			return nil
		})
	})

	t.Run("always", func(t *testing.T) {
		f := newInitializedGadgetFamily(t, "wg-always", "enforce")
		// A person adds the approval through the proxy: user annotations
		// stay editable.
		approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"always"}]`, wgAPIVersion)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{wgAnnApprovals: approval}}})
		_, err := f.alice.dyn.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType, patch, metav1.PatchOptions{})
		mustf(t, err, "alice adds an always approval through the proxy")
		if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
			t.Fatalf("the approval alice wrote is stored as %q", got)
		}
		f.settleGadget("g", "Allow/DriftApproved")
		write := func(v string) {
			t.Helper()
			mark := wgMark(t)
			_, err := f.setValue("g", v, false)
			mustf(t, err, "drift write %s under an always approval", v)
			d := wgDecision(t, mark, "gadgets", f.ns, "g")
			wgExpectDecision(t, d, "Allow", "DriftApproved")
			wgExpectField(t, d, "approvalMode", "always")
		}
		write("b")
		write("c")
		f.bumpSpec()
		f.setStatus(true)
		f.settleGadget("g", "Allow/DriftApproved")
		write("d")
		if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
			t.Fatalf("the always approval changed: %q", got)
		}
		if v := f.gadgetValue("g"); v != "d" {
			t.Fatalf("Gadget value %q", v)
		}
	})

	t.Run("rejection wins over always", func(t *testing.T) {
		f := newInitializedGadgetFamily(t, "wg-reject", "enforce")
		approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"always"}]`, wgAPIVersion)
		rejection := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","reason":"needs SRE review (ticket OPS-7)"}]`, wgAPIVersion)
		f.annotateWidget(map[string]*string{wgAnnApprovals: &approval, wgAnnRejections: &rejection})
		f.settleGadget("g", "Deny/DriftRejected")
		mark := wgMark(t)
		_, err := f.setValue("g", "b", false)
		s := wgDenied(t, err, f, "Gadget", "g", wgAnnRejections)
		if !strings.Contains(s.Message, "needs SRE review (ticket OPS-7)") {
			t.Errorf("the denial does not carry the rejection reason: %s", s.Message)
		}
		if c, ok := wgCause(s, "KausalityRejected"); !ok || c.Message != "needs SRE review (ticket OPS-7)" {
			t.Errorf("no rejection cause with the reason: %+v", s.Details.Causes)
		}
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Deny", "DriftRejected")
		wgExpectField(t, d, "rejection", "Gadget/g")
		if v := f.gadgetValue("g"); v != "a" {
			t.Fatalf("Gadget value %q", v)
		}
	})
}

func crdFreeze(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        []string
	}{
		{name: "true", value: "true", want: []string{"is frozen"}},
		{name: "json", value: `{"user":"ops@example.com","reason":"incident 42"}`, want: []string{"is frozen by ops@example.com", "incident 42"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newInitializedGadgetFamily(t, "wg-freeze", "enforce")
			f.bumpSpec() // the controller's next write would be expected
			f.annotateWidget(map[string]*string{wgAnnFreeze: &tc.value})
			f.settleGadget("g", "Deny/Frozen")

			mark := wgMark(t)
			_, err := f.setValue("g", "b", false)
			s := wgDenied(t, err, f, "Gadget", "g", wgAnnFreeze)
			for _, want := range tc.want {
				if !strings.Contains(s.Message, want) {
					t.Errorf("the denial does not say %q: %s", want, s.Message)
				}
			}
			if _, ok := wgCause(s, "KausalityFrozen"); !ok {
				t.Errorf("no frozen cause: %+v", s.Details.Causes)
			}
			wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "Frozen")

			// Another actor is frozen out as well.
			_, err = f.writeGadget(f.alice, "g", false, func(g *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(g.Object, "by-alice", "spec", "value")
			})
			wgStatus(t, err, 403, "alice writing under a frozen Widget")

			// Unfreezing lets the expected write through.
			f.annotateWidget(map[string]*string{wgAnnFreeze: nil})
			f.settleGadget("g", "Allow/Expected")
			_, err = f.setValue("g", "c", false)
			mustf(t, err, "expected write after unfreezing")
			if v := f.gadgetValue("g"); v != "c" {
				t.Fatalf("Gadget value %q", v)
			}
		})
	}
}

func crdSnooze(t *testing.T) {
	f := newInitializedGadgetFamily(t, "wg-snooze", "enforce")
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	f.annotateWidget(map[string]*string{wgAnnSnooze: &until})
	f.settleGadget("g", "Deny/DriftUnapproved")
	f.ctrl.warnings.take()
	mark := wgMark(t)
	_, err := f.setValue("g", "b", false)
	wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
	if w := f.ctrl.warnings.take(); len(w) != 0 {
		t.Errorf("a valid snooze produced warnings: %q", w)
	}
	d := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Deny", "DriftUnapproved")
	wgExpectField(t, d, "mode", "enforce")
	// Snooze suppresses notifications, not decisions; the line says so.
	wgExpectField(t, d, "snoozed", true)
	if v := f.gadgetValue("g"); v != "a" {
		t.Fatalf("Gadget value %q", v)
	}
}

func crdDeletionCleanup(t *testing.T) {
	f := newInitializedGadgetFamily(t, "wg-del", "enforce")
	_, err := f.admin.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":["e2e.kausality.io/hold"]}}`), metav1.PatchOptions{})
	mustf(t, err, "adding a finalizer")
	err = f.alice.dyn.Resource(framework.WidgetGVR).Delete(context.Background(), f.widget, metav1.DeleteOptions{})
	mustf(t, err, "alice deletes the Widget through the proxy")
	if f.getWidget().GetDeletionTimestamp() == nil {
		t.Fatal("the Widget has no deletionTimestamp")
	}

	mark := wgMark(t)
	_, err = f.setValue("g", "cleanup", false)
	mustf(t, err, "the controller's cleanup write under a deleting Widget")
	d := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Allow", "ParentDeleting")
	wgExpectField(t, d, "lifecyclePhase", "Deleting")

	// Let the Widget go: the garbage collector (kube-controller-manager,
	// through the proxy) deletes the Gadget, also as ParentDeleting.
	mark = wgMark(t)
	_, err = f.admin.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	mustf(t, err, "removing the finalizer")
	eventually(t, 90*time.Second, "the garbage collector deletes the Gadget", func() error {
		_, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("Gadget still there (%v)", err)
	})
	d = wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Allow", "ParentDeleting")
	wgExpectField(t, d, "operation", "DELETE")
	wgExpectField(t, d, "user", "system:serviceaccount:kube-system:generic-garbage-collector")
}

func crdOnceApprovalIsUsedExactlyOnce(t *testing.T) {
	const n = 8
	f := newOnceApprovedGadget(t, "wg-race")
	approval := f.getWidget().GetAnnotations()[wgAnnApprovals]
	// A dry-run sees the approval and does not use it up.
	f.settleGadget("g", "Allow/DriftApproved")
	if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
		t.Fatalf("a dry-run changed the approvals: %q", got)
	}

	mark := wgMark(t)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			patch := fmt.Sprintf(`{"spec":{"value":"burst-%d"}}`, i)
			_, errs[i] = f.gadgets(f.ctrl).Patch(context.Background(), "g", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: wgManager})
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Errorf("writes %d and %d both succeeded on one once approval", winner, i)
			}
			winner = i
		case apierrors.IsForbidden(err), apierrors.IsConflict(err):
		default:
			t.Errorf("write %d: %v, want success, 403 or 409", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no write used the once approval: %v", errs)
	}
	if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
		t.Errorf("the once approval is still on the Widget: %q", v)
	}
	if v := f.gadgetValue("g"); v != fmt.Sprintf("burst-%d", winner) {
		t.Errorf("Gadget value %q, want the winner's burst-%d", v, winner)
	}
	var lines []framework.DecisionLine
	eventually(t, 15*time.Second, "a decision line for each of the writes", func() error {
		lines = wgDecisionsAfter(t, mark, "gadgets", f.ns, "g")
		if len(lines) < n {
			return fmt.Errorf("%d lines", len(lines))
		}
		return nil
	})
	// A write decided as approved may still be refused before it is
	// forwarded (its dry run meets the winner's write); only the
	// outcome says which write used the approval.
	approved := 0
	for _, d := range lines {
		if d.Str("decision") == "Allow" {
			if d.Str("category") != "DriftApproved" {
				t.Errorf("allowed as %s: %v", d.Str("category"), d)
			}
			if strings.HasPrefix(d.Str("outcome"), "forwarded:2") {
				approved++
			}
		}
	}
	if approved != 1 {
		t.Errorf("%d writes went through as approved, want exactly 1", approved)
	}
}

func crdMalformedAnnotations(t *testing.T) {
	f := newInitializedGadgetFamily(t, "wg-malformed", "enforce")

	broken := `[{"apiVersion":"` + wgAPIVersion + `","kind":"Gadget","name":"g","mode":"always"`
	f.annotateWidget(map[string]*string{wgAnnApprovals: &broken})
	f.settleGadget("g", "Deny/DriftUnapproved")
	f.ctrl.warnings.take()
	mark := wgMark(t)
	_, err := f.setValue("g", "b", false)
	wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
	if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, wgAnnApprovals, "malformed") {
		t.Errorf("no Warning naming the malformed %s: %q", wgAnnApprovals, w)
	}
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")

	// Broken rejections count as rejected, even with an always approval.
	approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"always"}]`, wgAPIVersion)
	brokenRej := `{"not":"a list"`
	f.annotateWidget(map[string]*string{wgAnnApprovals: &approval, wgAnnRejections: &brokenRej})
	f.settleGadget("g", "Deny/DriftRejected")
	f.ctrl.warnings.take()
	mark = wgMark(t)
	_, err = f.setValue("g", "c", false)
	s := wgDenied(t, err, f, "Gadget", "g", wgAnnRejections)
	if !strings.Contains(s.Message, "malformed") {
		t.Errorf("the denial does not say the rejections are malformed: %s", s.Message)
	}
	if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, wgAnnRejections, "malformed") {
		t.Errorf("no Warning naming the malformed %s: %q", wgAnnRejections, w)
	}
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftRejected")

	// A broken freeze counts as frozen.
	brokenFreeze := "yes please"
	f.annotateWidget(map[string]*string{wgAnnRejections: nil, wgAnnFreeze: &brokenFreeze})
	f.settleGadget("g", "Deny/Frozen")
	f.ctrl.warnings.take()
	_, err = f.setValue("g", "d", false)
	wgDenied(t, err, f, "Gadget", "g", wgAnnFreeze)
	if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, wgAnnFreeze, "malformed") {
		t.Errorf("no Warning naming the malformed %s: %q", wgAnnFreeze, w)
	}
	if v := f.gadgetValue("g"); v != "a" {
		t.Fatalf("Gadget value %q", v)
	}
}

func crdModeComesFromStoredState(t *testing.T) {
	setLog := func(g *unstructured.Unstructured, v string) {
		ann := g.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[wgAnnMode] = "log"
		g.SetAnnotations(ann)
		_ = unstructured.SetNestedField(g.Object, v, "spec", "value")
	}
	t.Run("namespace enforce", func(t *testing.T) {
		f := newInitializedGadgetFamily(t, "wg-mode-ns", "enforce")
		f.settleGadget("g", "Deny/DriftUnapproved")
		mark := wgMark(t)
		_, err := f.writeGadget(f.ctrl, "g", false, func(g *unstructured.Unstructured) { setLog(g, "b") })
		wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Deny", "DriftUnapproved")
		wgExpectField(t, d, "mode", "enforce")
		wgExpectField(t, d, "modeSource", "namespace")
		g, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{})
		mustf(t, err, "get Gadget")
		if _, ok := g.GetAnnotations()[wgAnnMode]; ok {
			t.Errorf("the denied write stored its mode annotation")
		}
	})
	t.Run("object enforce in a log namespace", func(t *testing.T) {
		f := newWGFamily(t, "wg-mode-obj", "log")
		_, err := f.createGadget("g", "a", false)
		mustf(t, err, "create Gadget")
		_, err = f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Patch(context.Background(), "g", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"kausality.io/mode":"enforce"}}}`), metav1.PatchOptions{})
		mustf(t, err, "annotating the Gadget with mode enforce")
		f.initialize()
		f.settleGadget("g", "Deny/DriftUnapproved")
		mark := wgMark(t)
		_, err = f.writeGadget(f.ctrl, "g", false, func(g *unstructured.Unstructured) { setLog(g, "b") })
		wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Deny", "DriftUnapproved")
		wgExpectField(t, d, "mode", "enforce")
		wgExpectField(t, d, "modeSource", "object")
		if v := f.gadgetValue("g"); v != "a" {
			t.Fatalf("Gadget value %q", v)
		}
	})
}
