//go:build hardening

package hardening

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A replica is killed (SIGKILL) while the write a once approval was
// reserved for is in flight: it took the approval off the Rig, and kube-
// apiserver, held by an admission webhook, has not answered yet. The write
// is then refused, so it never lands. The other replica finds the dead
// one's reservation record once it is older than
// --approval-reservation-orphan-age and puts the approval back; the
// controller's retry then gets its write.
func TestReservedApprovalOfAKilledReplicaComesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bad := &violations{}
	ctl, err := newController(ctx, 99, "killed-mid-write", &counters{}, newLedger(), bad)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := ctl.bumpRig(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	const tally = "t"
	if err := ctl.create(ctx, tally); err != nil {
		t.Fatal(err)
	}
	if err := ctl.writeStatus(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := ctl.approveOnce(ctx, tally, gen); err != nil {
		t.Fatal(err)
	}
	if err := ctl.waitDecision(ctx, tally, "Allow/DriftApproved"); err != nil {
		t.Fatal(err)
	}

	// The webhook holds the real (not dry-run) update of the Tally until
	// released, then refuses it; probes are refused at once.
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	hook, err := framework.StartAdmissionHook(ctx, env.cp.AdminClient(), ctl.ns+"-holds-writes", ctl.ns, 30,
		[]admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{"tallies"}},
		}},
		func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if req.Name != tally || ptr.Deref(req.DryRun, false) {
				if req.Name != tally {
					return framework.Denied("probe")
				}
				return framework.Allowed()
			}
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-release
			return framework.Denied("the write a killed replica forwarded")
		})
	if err != nil {
		t.Fatal(err)
	}
	defer hook.Close()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	if err := poll(ctx, time.Minute, func() error {
		probe := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/" + version, "kind": "Tally",
			"metadata": map[string]any{"generateName": "probe-", "namespace": ctl.ns},
			"spec":     map[string]any{"created": "probe", "count": int64(0), "keys": map[string]any{}},
		}}
		_, err := env.admin.Resource(tallyGVR).Namespace(ctl.ns).Create(ctx, probe, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "probe") {
			return fmt.Errorf("the webhook is not in force yet: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	before, err := env.admin.Resource(tallyGVR).Namespace(ctl.ns).Get(ctx, tally, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim := env.replicas[1]
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": before.GetResourceVersion()}, "spec": map[string]any{"count": int64(100)}})
	go func() {
		_, _ = ctl.tallies(1).Patch(ctx, tally, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	}()
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the approved write never reached kube-apiserver's admission")
	}
	if present, err := ctl.approvalPresent(ctx, tally); err != nil || present {
		t.Fatalf("the approval is on the Rig while its write is in flight (present %v, %v): it was not reserved", present, err)
	}
	victim.kill()
	close(release)
	released = true
	defer func() {
		if err := victim.start(); err != nil {
			t.Fatal(err)
		}
		if _, err := victim.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
	}()

	// replica-0 looks for orphans every 10s and settles those older than
	// 30s (the suite's --approval-reservation-orphan-age).
	start := time.Now()
	if err := poll(ctx, 2*time.Minute, func() error {
		present, err := ctl.approvalPresent(ctx, tally)
		if err != nil {
			return err
		}
		if !present {
			return fmt.Errorf("the approval is not back on the Rig")
		}
		return nil
	}); err != nil {
		t.Fatalf("the approval reserved by the killed replica did not come back: %v", err)
	}
	t.Logf("the approval came back %.1fs after the replica was killed", time.Since(start).Seconds())
	after, err := env.admin.Resource(tallyGVR).Namespace(ctl.ns).Get(ctx, tally, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Fatalf("the refused write changed the Tally (resourceVersion %s → %s)", before.GetResourceVersion(), after.GetResourceVersion())
	}
	records, err := env.cp.AdminClient().CoreV1().ConfigMaps(recordNamespace).List(ctx,
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=approval-reservation"})
	if err != nil {
		t.Fatal(err)
	}
	if len(records.Items) != 0 {
		t.Errorf("%d reservation records left after the settlement", len(records.Items))
	}
	rig, err := env.admin.Resource(rigGVR).Namespace(ctl.ns).Get(ctx, "rig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stamps := rig.GetAnnotations()["kausality.io/reservations"]; stamps != "" {
		t.Errorf("the Rig still names settled reservations: %q", stamps)
	}

	// The controller's retry, through the surviving replica, gets its write.
	hook.Remove()
	if err := poll(ctx, time.Minute, func() error {
		_, err := ctl.tallies(0).Patch(ctx, tally, types.MergePatchType, []byte(`{"spec":{"count":100}}`), metav1.PatchOptions{FieldManager: fieldManager})
		return err
	}); err != nil {
		t.Fatalf("the approved write after the approval came back: %v", err)
	}
	if present, err := ctl.approvalPresent(ctx, tally); err != nil || present {
		t.Fatalf("the approval is still on the Rig after the write it admitted (present %v, %v)", present, err)
	}
	for _, v := range bad.take() {
		t.Error(v)
	}
}
