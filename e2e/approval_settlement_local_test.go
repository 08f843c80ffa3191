//go:build !kind

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A once approval is not spent by a write kube-apiserver could not finish.
// A validating webhook admits dry runs and breaks off on real writes, so
// the approved write passes the proxy's dry run, is forwarded, and is
// answered 500 by kube-apiserver with nothing stored. A 500 does not say
// the write is over (a storage transaction that timed out may still
// commit), so the approval stays reserved until the write's deadline at
// kube-apiserver has passed; then it must be back on the parent, and
// admit the write once the webhook is gone.
func TestOnceApprovalSurvivesAWriteKubeAPIServerCouldNotFinish(t *testing.T) {
	f := newOnceApprovedGadget(t, "wg-5xx")
	f.settleGadget("g", "Allow/DriftApproved")

	var broken atomic.Int64
	hook, err := framework.StartAdmissionHook(context.Background(), directClient(t), f.ns+"-breaks-writes", f.ns, 5,
		[]admissionregistrationv1.RuleWithOperations{gadgetWrites()},
		func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if !ptr.Deref(req.DryRun, false) {
				broken.Add(1)
				panic(http.ErrAbortHandler)
			}
			return framework.Allowed()
		})
	mustf(t, err, "the webhook")
	t.Cleanup(hook.Close)
	// kube-apiserver picks the webhook up from its own informer: a probe
	// Gadget the webhook breaks says it is in force.
	waitForProbe(t, f, func(err error) bool { return err != nil && broken.Load() > 0 }, "the webhook to be in force")

	before := broken.Load()
	_, err = f.setValue("g", "b", false)
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code < 500 {
		t.Fatalf("the approved write with the webhook breaking off: %v, want kube-apiserver's 5xx", err)
	}
	if broken.Load() == before {
		t.Fatalf("the write never reached the webhook (so never kube-apiserver's storage path): %v", err)
	}
	if v := f.gadgetValue("g"); v != "a" {
		t.Fatalf("kube-apiserver stored the write it answered %d: value %q", status.Status().Code, v)
	}
	// The write carried the proxy's --request-timeout (60s) as its
	// timeout; it can land for 10s more.
	if got := wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]); len(got) != 0 {
		t.Fatalf("the once approval is back while its write may still land: approvals %v", got)
	}
	eventually(t, 2*time.Minute, "the once approval back once the write can no longer land", func() error {
		if got := wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]); len(got) != 1 {
			return fmt.Errorf("the once approval was spent by a write kube-apiserver did not store: approvals %v", got)
		}
		return nil
	})

	hook.Remove()
	waitForProbe(t, f, func(err error) bool { return err == nil }, "the webhook to be gone")
	_, err = f.setValue("g", "b", false)
	mustf(t, err, "the approved write once the webhook is gone")
	if v := f.gadgetValue("g"); v != "b" {
		t.Fatalf("the approved write was not stored: value %q", v)
	}
	if got := wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]); len(got) != 0 {
		t.Fatalf("the once approval is still there after the write it admitted: %v", got)
	}
	// Both reservations were recorded, and both records went with their
	// settlement.
	eventually(t, 30*time.Second, "no approval reservation records left", func() error {
		list, err := directClient(t).CoreV1().ConfigMaps(framework.DriftNamespace).List(context.Background(),
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=approval-reservation"})
		if err != nil {
			return err
		}
		if len(list.Items) != 0 {
			return fmt.Errorf("%d records", len(list.Items))
		}
		if stamps := f.getWidget().GetAnnotations()["kausality.io/reservations"]; stamps != "" {
			return fmt.Errorf("the Widget still names reservations %q", stamps)
		}
		return nil
	})

	// kausality.io/reservations is the proxy's alone: a person's write
	// through the proxy cannot name a record on the parent.
	_, err = f.alice.dyn.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"kausality.io/reservations":"kausality-reservation-forged"}}}`), metav1.PatchOptions{})
	mustf(t, err, "alice's patch of the Widget's annotations")
	if stamps := f.getWidget().GetAnnotations()["kausality.io/reservations"]; strings.Contains(stamps, "forged") {
		t.Fatalf("a person's write named a reservation record on the parent: %q", stamps)
	}
}

// gadgetWrites is the webhook rule for creates and updates of Gadgets.
func gadgetWrites() admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups:   []string{framework.GadgetGVR.Group},
			APIVersions: []string{framework.GadgetGVR.Version},
			Resources:   []string{framework.GadgetGVR.Resource},
		},
	}
}

// waitForProbe creates (and deletes) probe Gadgets directly in f's
// namespace until done accepts the create's error.
func waitForProbe(t *testing.T, f *wgFamily, done func(error) bool, what string) {
	t.Helper()
	ctx := context.Background()
	gadgets := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns)
	deadline := time.Now().Add(time.Minute)
	for {
		probe := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wgAPIVersion, "kind": "Gadget",
			"metadata": map[string]any{"generateName": "probe-"},
			"spec":     map[string]any{"value": "probe"},
		}}
		created, err := gadgets.Create(ctx, probe, metav1.CreateOptions{})
		if err == nil {
			_ = gadgets.Delete(ctx, created.GetName(), metav1.DeleteOptions{})
		}
		if done(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s (last probe: %v)", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
