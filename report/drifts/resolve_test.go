package drifts

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

func parentAt(generation int64, replicas int64, ann map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "ns", "uid": "parent-uid", "generation": generation},
		"spec":     map[string]any{"replicas": replicas},
	}}
	if ann != nil {
		u.SetAnnotations(ann)
	}
	return u
}

func childWithUID(uid string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"name": "web-1", "namespace": "ns"}}}
	u.SetUID(types.UID(uid))
	return u
}

// openRecord is a drift detected at parent generation 4, spec replicas 3.
func openRecord() *Record {
	return &Record{
		Name: RecordName("0123456789abcdef"),
		Report: v1alpha1.DriftReport{Spec: v1alpha1.DriftReportSpec{ID: "0123456789abcdef", Phase: v1alpha1.PhaseDetected,
			Parent: v1alpha1.ParentRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web", UID: "parent-uid", Generation: 4, ObservedGeneration: 4},
			Child:  v1alpha1.ChildRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "ns", Name: "web-1", UID: "child-uid"}}},
		State: State{ParentSpecHash: settle.SpecHash(parentAt(4, 3, nil))},
	}
}

var detectedAt = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// deniedCreate makes r the drift of a create, detected at detectedAt.
func deniedCreate(r *Record) {
	r.Report.Spec.Child.UID = ""
	r.Report.Spec.Request.Operation = "CREATE"
	r.State.DetectedAt = metav1.NewTime(detectedAt)
}

func TestResolve(t *testing.T) {
	approvals := func(v string) map[string]string { return map[string]string{"kausality.io/approvals": v} }
	deleting := parentAt(4, 3, nil)
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)
	for _, tc := range []struct {
		name     string
		record   func(*Record)
		observed Observed
		want     string
	}{
		{name: "nothing changed", observed: Observed{Parent: parentAt(4, 3, nil), Child: childWithUID("child-uid")}},
		{name: "an annotation-only generation bump is no spec change",
			observed: Observed{Parent: parentAt(5, 3, map[string]string{"note": "x"}), Child: childWithUID("child-uid")}},
		{name: "a rejection does not end the drift",
			observed: Observed{Parent: parentAt(5, 3, map[string]string{"kausality.io/rejections": `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","reason":"no"}]`}), Child: childWithUID("child-uid")}},
		{name: "the parent's spec changed", observed: Observed{Parent: parentAt(5, 4, nil), Child: childWithUID("child-uid")},
			want: v1alpha1.ReasonParentChanged},
		{name: "without a spec hash, a newer generation counts as a change", record: func(r *Record) { r.State.ParentSpecHash = "" },
			observed: Observed{Parent: parentAt(5, 3, nil), Child: childWithUID("child-uid")}, want: v1alpha1.ReasonParentChanged},
		{name: "the child was deleted", observed: Observed{Parent: parentAt(4, 3, nil)}, want: v1alpha1.ReasonChildDeleted},
		{name: "the child was replaced by one of the same name", observed: Observed{Parent: parentAt(4, 3, nil), Child: childWithUID("other")},
			want: v1alpha1.ReasonChildDeleted},
		{name: "a child that did not exist yet (a denied create) is no deletion", record: func(r *Record) { r.Report.Spec.Child.UID = "" },
			observed: Observed{Parent: parentAt(4, 3, nil)}},
		{name: "a denied create whose child is still missing after the grace period never happened", record: deniedCreate,
			observed: Observed{Parent: parentAt(4, 3, nil), Now: detectedAt.Add(5 * time.Minute), CreateGrace: 5 * time.Minute}, want: ReasonNotCreated},
		{name: "a denied create within the grace period is still open", record: deniedCreate,
			observed: Observed{Parent: parentAt(4, 3, nil), Now: detectedAt.Add(time.Minute), CreateGrace: 5 * time.Minute}},
		{name: "a create whose child came into being (log mode) is still open", record: deniedCreate,
			observed: Observed{Parent: parentAt(4, 3, nil), Child: childWithUID("new-uid"), Now: detectedAt.Add(time.Hour), CreateGrace: 5 * time.Minute}},
		{name: "an update's missing child is not a denied create", record: func(r *Record) {
			deniedCreate(r)
			r.Report.Spec.Request.Operation = "UPDATE"
		}, observed: Observed{Parent: parentAt(4, 3, nil), Now: detectedAt.Add(time.Hour), CreateGrace: 5 * time.Minute}},
		{name: "the parent was deleted", observed: Observed{Child: childWithUID("child-uid")}, want: ReasonParentDeleted},
		{name: "the parent is being deleted", observed: Observed{Parent: deleting, Child: childWithUID("child-uid")}, want: ReasonParentDeleted},
		{name: "the parent was replaced", observed: Observed{Parent: func() *unstructured.Unstructured {
			p := parentAt(1, 3, nil)
			p.SetUID("new")
			return p
		}(), Child: childWithUID("child-uid")}, want: ReasonParentDeleted},
		{name: "a once approval for the child at the detected generation",
			observed: Observed{Parent: parentAt(5, 3, approvals(`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":4,"mode":"once"}]`)), Child: childWithUID("child-uid")},
			want:     v1alpha1.ReasonApproved},
		{name: "a generation approval at the bumped generation of the same spec",
			observed: Observed{Parent: parentAt(5, 3, approvals(`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"generation"}]`)), Child: childWithUID("child-uid")},
			want:     v1alpha1.ReasonApproved},
		{name: "an always approval by wildcard",
			observed: Observed{Parent: parentAt(5, 3, approvals(`[{"apiVersion":"*","kind":"*","name":"*","mode":"always"}]`)), Child: childWithUID("child-uid")},
			want:     v1alpha1.ReasonApproved},
		{name: "an approval does not end a violation of allowances", record: func(r *Record) {
			r.Report.Spec.Allowances = &v1alpha1.AllowanceVerdict{Mode: "enforce", Violations: []v1alpha1.AllowanceViolation{{Field: "spec.template", NeededKind: "ReplicaSet", NeededMutation: "spec.template"}}}
		}, observed: Observed{Parent: parentAt(5, 3, approvals(`[{"apiVersion":"*","kind":"*","name":"*","mode":"always"}]`)), Child: childWithUID("child-uid")}},
		{name: "a violation of allowances ends when the parent's spec changes", record: func(r *Record) {
			r.Report.Spec.Allowances = &v1alpha1.AllowanceVerdict{Mode: "log"}
		}, observed: Observed{Parent: parentAt(5, 4, nil), Child: childWithUID("child-uid")}, want: v1alpha1.ReasonParentChanged},
		{name: "an approval for an older spec does not count",
			observed: Observed{Parent: parentAt(5, 3, approvals(`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":2,"mode":"once"}]`)), Child: childWithUID("child-uid")}},
		{name: "an approval for another child does not count",
			observed: Observed{Parent: parentAt(5, 3, approvals(`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-2","mode":"always"}]`)), Child: childWithUID("child-uid")}},
		{name: "broken approvals JSON approves nothing",
			observed: Observed{Parent: parentAt(5, 3, approvals(`[{"apiVersion":`)), Child: childWithUID("child-uid")}},
		{name: "a newer drift of the pair supersedes it", observed: Observed{Parent: parentAt(4, 3, nil), Child: childWithUID("child-uid"), Superseded: true},
			want: ReasonSuperseded},
		{name: "a deletion wins over a newer drift", observed: Observed{Parent: parentAt(4, 3, nil), Superseded: true},
			want: v1alpha1.ReasonChildDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := openRecord()
			if tc.record != nil {
				tc.record(r)
			}
			got, ended := Resolve(r, tc.observed)
			if ended != (tc.want != "") || got != tc.want {
				t.Errorf("Resolve = %q, %v; want %q", got, ended, tc.want)
			}
		})
	}
}

func TestSnoozedUntil(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{name: "no snooze"},
		{name: "snoozed for an hour", ann: map[string]string{"kausality.io/snooze-until": now.Add(time.Hour).Format(time.RFC3339)}, want: true},
		{name: "expired", ann: map[string]string{"kausality.io/snooze-until": now.Add(-time.Minute).Format(time.RFC3339)}},
		{name: "the newer spelling", ann: map[string]string{"kausality.io/snooze": `{"expiry":"` + now.Add(time.Hour).Format(time.RFC3339) + `","user":"alice"}`}, want: true},
		{name: "broken counts as not snoozed", ann: map[string]string{"kausality.io/snooze-until": "soon"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			until, snoozed := snoozedUntil(parentAt(4, 3, tc.ann), now)
			if snoozed != tc.want || (snoozed && !until.After(now)) {
				t.Errorf("snoozedUntil = %s, %v", until, snoozed)
			}
		})
	}
	if _, snoozed := snoozedUntil(nil, now); snoozed {
		t.Error("a missing parent is not snoozed")
	}
}

func TestNewerOrdersByDetectionThenName(t *testing.T) {
	a, b := openRecord(), openRecord()
	b.Name = RecordName("fedcba9876543210")
	t0 := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	a.State.DetectedAt, b.State.DetectedAt = t0, metav1.NewTime(t0.Add(time.Second))
	if !newer(b, a) || newer(a, b) {
		t.Error("the later detection is newer")
	}
	b.State.DetectedAt = t0
	if newer(a, b) == newer(b, a) {
		t.Error("ties are broken one way")
	}
}
