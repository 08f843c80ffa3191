//go:build !kind

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/report/drifts"
)

// floodSuppressedLog is the warning a replica logs once per flood of one
// controller's suppressed drifts.
const floodSuppressedLog = "DriftReports of a controller are suppressed"

// createGadgetAs is actor a creating Gadget name, owned by f's Widget,
// with value as spec.value and the given annotations.
func createGadgetAs(f *wgFamily, a *wgActor, name, value string, annotations map[string]string) error {
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": wgAPIVersion,
		"kind":       "Gadget",
		"metadata":   map[string]any{"name": name, "namespace": f.ns},
		"spec":       map[string]any{"value": value},
	}}
	g.SetOwnerReferences([]metav1.OwnerReference{f.ownerRef()})
	g.SetAnnotations(annotations)
	_, err := f.gadgets(a).Create(context.Background(), g, metav1.CreateOptions{FieldManager: wgManager})
	return err
}

// recordsUsage sums the drift records of a namespace.
func recordsUsage(recs []corev1.ConfigMap) (largest, total int) {
	for _, cm := range recs {
		n := 0
		for k, v := range cm.Data {
			n += len(k) + len(v)
		}
		total += n
		largest = max(largest, n)
	}
	return largest, total
}

// logCount counts the lines of a replica's log that contain s.
func logCount(t *testing.T, log func() ([]byte, error), s string) int {
	t.Helper()
	b, err := log()
	mustf(t, err, "reading the replica's log")
	return bytes.Count(b, []byte(s))
}

// TestAttackDeniedCreateFloodFillsDriftRecords replays a controller that
// sends a thousand denied creates under new names: each one used to leave
// a drift record in the proxy's namespace, written with the proxy's
// credentials, until a global cap dropped every controller's reports. Now
// the flooding controller's records stay within its quota and rate limit,
// the flood is reported once, and another controller's drift is still
// reported.
func TestAttackDeniedCreateFloodFillsDriftRecords(t *testing.T) {
	rig := newDriftRig(t, "rec-flood", 1, nil)
	replica := rig.replicas[0]

	// A second controller: its own user, the recorded status writer of its
	// own Widget.
	other := newWGFamily(t, "rec-other", "enforce")
	otherCfg, err := cluster.UserThroughProxy("records-other-controller", "system:masters")
	mustf(t, err, "the other controller's identity")
	other.ctrl = wgNewActor(t, otherCfg, "records-other-controller")
	_, err = other.createGadget("g", "v1", false)
	mustf(t, err, "the other controller creates Gadget g while its Widget initializes")
	other.initialize()
	otherThroughReplica := wgNewActor(t, replica.Through(otherCfg), "records-other-controller")

	const creates, workers = 1000, 8
	var denied, refusedOtherwise atomic.Int64
	var firstOther atomic.Value
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= creates; i = next.Add(1) {
				err := createGadgetAs(rig.f, rig.ctrls[0], "flood-"+strconv.FormatInt(i, 10), "x", nil)
				if apierrors.IsForbidden(err) {
					denied.Add(1)
					continue
				}
				refusedOtherwise.Add(1)
				firstOther.CompareAndSwap(nil, fmt.Sprintf("create %d: %v", i, err))
			}
		}()
	}
	wg.Wait()
	if denied.Load() != creates {
		t.Fatalf("%d of %d creates denied; the first other answer: %v", denied.Load(), creates, firstOther.Load())
	}

	// The other controller drifts after the flood.
	_, err = other.writeGadget(otherThroughReplica, "g", false, func(g *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(g.Object, "drifted", "spec", "value")
	})
	wgDenied(t, err, other, "Gadget", "g", wgAnnApprovals)
	eventually(t, 60*time.Second, "the other controller's Detected report", func() error {
		for _, r := range rig.sink.For(other.ns, "g") {
			if r.Spec.Phase == v1alpha1.PhaseDetected && r.Spec.Request.User == "records-other-controller" {
				return nil
			}
		}
		return fmt.Errorf("none yet (%d reports in all)", len(rig.sink.All()))
	})

	// Everything the flood could record has been recorded by now: the
	// recorder is one queue, and the other controller's drift came last.
	recs := rig.records()
	largest, total := recordsUsage(recs)
	t.Logf("%d denied creates left %d drift records, %d bytes in all, the largest %d bytes", creates, len(recs), total, largest)
	if len(recs) > drifts.DefaultControllerRecords+1 || total > drifts.DefaultControllerBytes+drifts.MaxRecordBytes {
		t.Errorf("%d records of %d bytes in the proxy's namespace after %d denied creates, want at most %d records and %d bytes (one controller's quota and the other's record)",
			len(recs), total, creates, drifts.DefaultControllerRecords+1, drifts.DefaultControllerBytes+drifts.MaxRecordBytes)
	}

	// The flood is reported once: one warning line, one flood counted.
	if n := logCount(t, replica.Log, floodSuppressedLog); n != 1 {
		t.Errorf("the replica logged %q %d times, want once for the flood", floodSuppressedLog, n)
	}
	floods := 0.0
	for _, q := range []string{drifts.QuotaRate, drifts.QuotaControllerRecords, drifts.QuotaControllerBytes, drifts.QuotaParentRecords, drifts.QuotaParentBytes, drifts.QuotaTotal} {
		v, _ := strconv.ParseFloat(metricValue(t, replica.MetricsURL, `kausality_proxy_driftreports_floods_total{quota="`+q+`"}`), 64)
		floods += v
	}
	if floods != 1 {
		t.Errorf("kausality_proxy_driftreports_floods_total sums to %v, want 1", floods)
	}
}

// TestAttackLargeDeniedCreateLeavesBoundedRecord replays a denied create
// of a 400 KB object: its drift record used to hold a copy of the object.
// Now it holds the references and the truncated changes, at most
// drifts.MaxRecordBytes, and the report still names the change.
func TestAttackLargeDeniedCreateLeavesBoundedRecord(t *testing.T) {
	rig := newDriftRig(t, "rec-large", 1, nil)
	big := strings.Repeat("x", 400<<10)
	err := createGadgetAs(rig.f, rig.ctrls[0], "large", big, map[string]string{"example.com/blob": strings.Repeat("y", 100<<10)})
	wgDenied(t, err, rig.f, "Gadget", "large", wgAnnApprovals)

	var det v1alpha1.DriftReport
	eventually(t, 60*time.Second, "the Detected report of the large create", func() error {
		for _, r := range rig.sink.For(rig.f.ns, "large") {
			if r.Spec.Phase == v1alpha1.PhaseDetected {
				det = r
				return nil
			}
		}
		return fmt.Errorf("none yet (%d reports in all)", len(rig.sink.All()))
	})
	var valueChange bool
	for _, c := range det.Spec.Changes {
		if c.Path == "spec.value" && len(c.New) < 1024 && strings.HasPrefix(c.New, `"xxx`) {
			valueChange = true
		}
	}
	if !valueChange {
		t.Errorf("the report does not name the change of spec.value with a truncated value: %+v", det.Spec.Changes)
	}
	if n := len(det.Spec.NewObject.Raw); n > drifts.MaxRecordBytes {
		t.Errorf("the report carries a new object of %d bytes", n)
	}

	var recs []corev1.ConfigMap
	for _, cm := range rig.records() {
		if strings.Contains(cm.Data["report"], `"name":"large"`) {
			recs = append(recs, cm)
		}
	}
	if len(recs) != 1 {
		t.Fatalf("%d drift records of the large create, want 1", len(recs))
	}
	if largest, _ := recordsUsage(recs); largest > drifts.MaxRecordBytes {
		t.Errorf("the drift record of a denied %d-byte create holds %d bytes, want at most %d", len(big), largest, drifts.MaxRecordBytes)
	}
}
