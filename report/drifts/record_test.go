package drifts

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/report/escalation"
)

func TestRecordRoundTrip(t *testing.T) {
	r := openRecord()
	r.Report.Spec.NewObject = runtime.RawExtension{Raw: []byte(`{"kind":"ReplicaSet"}`)}
	r.State.DetectedAt = metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	r.State.Delivered = map[string]v1alpha1.DriftReportPhase{receiverKey("http://sink/"): v1alpha1.PhaseDetected}
	r.State.Slack = &escalation.MessageRef{Channel: "C1", Timestamp: "1.2"}
	r.State.Mode, r.State.Held = annotations.ModeEnforce, true
	cm, err := encode(r, "kausality-system")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != "kausality-drift-0123456789abcdef" || cm.Namespace != "kausality-system" ||
		cm.Labels[ManagedByLabel] != "kausality-proxy" || cm.Labels[ComponentLabel] != "drift-record" || cm.Labels[PairLabel] != PairHash(r.Report) {
		t.Fatalf("metadata %+v", cm.ObjectMeta)
	}
	if !RecordSelector().Matches(labels.Set(cm.Labels)) {
		t.Errorf("RecordSelector does not select the record's labels %v", cm.Labels)
	}
	got, err := DecodeRecord(cm)
	if err != nil {
		t.Fatal(err)
	}
	if got.State.Mode != annotations.ModeEnforce || !got.State.Held {
		t.Errorf("mode %q, held %v", got.State.Mode, got.State.Held)
	}
	if got.ID() != r.ID() || string(got.Report.Spec.NewObject.Raw) != `{"kind":"ReplicaSet"}` || !got.State.DetectedAt.Equal(&r.State.DetectedAt) ||
		got.State.Delivered[receiverKey("http://sink/")] != v1alpha1.PhaseDetected || *got.State.Slack != *r.State.Slack || got.State.ParentSpecHash != r.State.ParentSpecHash {
		t.Errorf("decoded %+v", got)
	}
}

func TestEncodeRefusesARecordLargerThanTheBound(t *testing.T) {
	r := openRecord()
	r.Report.Spec.NewObject = runtime.RawExtension{Raw: []byte(`{"data":"` + strings.Repeat("x", MaxRecordBytes) + `"}`)}
	if cm, err := encode(r, "ns"); err == nil {
		t.Fatalf("a record of %d bytes was encoded", len(cm.Data[reportKey]))
	}
}

func TestDecodeRefusesForeignContent(t *testing.T) {
	good, err := encode(openRecord(), "ns")
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(cm *corev1.ConfigMap){
		"report is not JSON":          func(cm *corev1.ConfigMap) { cm.Data[reportKey] = "{" },
		"state is not JSON":           func(cm *corev1.ConfigMap) { cm.Data[stateKey] = "[" },
		"the name names another id":   func(cm *corev1.ConfigMap) { cm.Name = RecordName("ffffffffffffffff") },
		"the report has no id at all": func(cm *corev1.ConfigMap) { cm.Data[reportKey] = `{"spec":{}}` },
	} {
		t.Run(name, func(t *testing.T) {
			cm := good.DeepCopy()
			mutate(cm)
			if _, err := decode(cm); err == nil {
				t.Error("decoded")
			}
		})
	}
}

func TestReopen(t *testing.T) {
	r := openRecord()
	a, b := receiverKey("http://a/"), receiverKey("http://b/")
	r.State.Resolved = &Resolution{Reason: v1alpha1.ReasonApproved}
	r.State.Delivered = map[string]v1alpha1.DriftReportPhase{a: v1alpha1.PhaseResolved, b: v1alpha1.PhaseDetected}
	r.State.Slack, r.State.SlackResolved = &escalation.MessageRef{Channel: "C", Timestamp: "1"}, true
	reopen(r, openRecord())
	if r.State.Resolved != nil {
		t.Error("still resolved")
	}
	if _, ok := r.State.Delivered[a]; ok {
		t.Error("a receiver that heard of the end must hear of the drift again")
	}
	if r.State.Delivered[b] != v1alpha1.PhaseDetected {
		t.Error("a receiver that never heard of the end sees the drift as never ended")
	}
	if r.State.Slack != nil || r.State.SlackResolved {
		t.Error("a resolved message is not reused: a new one is posted")
	}
}

func TestResolvedReport(t *testing.T) {
	r := openRecord()
	r.Report.Spec.NewObject = runtime.RawExtension{Raw: []byte(`{}`)}
	r.State.Resolved = &Resolution{Reason: v1alpha1.ReasonChildDeleted}
	got := resolvedReport(r)
	if got.Spec.ID != r.ID() || got.Spec.Phase != v1alpha1.PhaseResolved || got.Spec.Reason != v1alpha1.ReasonChildDeleted ||
		got.Spec.NewObject.Raw != nil || got.Kind != v1alpha1.DriftReportKind || got.APIVersion != v1alpha1.DriftReportAPIVersion || got.Spec.Child != r.Report.Spec.Child {
		t.Errorf("resolved report %+v", got)
	}
	if r.Report.Spec.NewObject.Raw == nil || r.Report.Spec.Phase != v1alpha1.PhaseDetected {
		t.Error("the record's own report was changed")
	}
}

func TestPairHashIgnoresTheVersion(t *testing.T) {
	a := openRecord().Report
	b := a
	b.Spec.Parent.APIVersion, b.Spec.Child.APIVersion = "apps/v1beta2", "apps/v1beta2"
	if PairHash(a) != PairHash(b) {
		t.Error("the same pair through another version has another hash")
	}
	c := a
	c.Spec.Child.Name = "web-2"
	if PairHash(a) == PairHash(c) {
		t.Error("another child, same hash")
	}
	if receiverKey("https://hooks.example/x?token=secret") == "" || strings.Contains(receiverKey("https://x/?token=secret"), "secret") {
		t.Error("receiver keys must not reveal the URL")
	}
}
