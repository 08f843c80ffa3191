package drifts

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

func TestAdmit(t *testing.T) {
	q := Quotas{ControllerRecords: 10, ControllerBytes: 100 << 10, ParentRecords: 5, ParentBytes: 50 << 10, Total: 100}
	for _, tc := range []struct {
		name  string
		facts QuotaFacts
		want  string
	}{
		{name: "room everywhere", facts: QuotaFacts{Controller: Usage{3, 3 << 10}, Parent: Usage{1, 1 << 10}, Total: 20, Controllers: 3, Size: 1 << 10}},
		{name: "the controller's records", facts: QuotaFacts{Controller: Usage{10, 10 << 10}, Total: 20, Controllers: 3, Size: 1 << 10},
			want: QuotaControllerRecords},
		{name: "the controller's bytes", facts: QuotaFacts{Controller: Usage{7, 98 << 10}, Total: 20, Controllers: 3, Size: 4 << 10},
			want: QuotaControllerBytes},
		{name: "the parent's records", facts: QuotaFacts{Controller: Usage{5, 5 << 10}, Parent: Usage{5, 5 << 10}, ParentController: Usage{5, 5 << 10}, ParentControllers: 1,
			Total: 20, Controllers: 3, Size: 1 << 10}, want: QuotaParentRecords},
		{name: "the parent's bytes", facts: QuotaFacts{Controller: Usage{4, 4 << 10}, Parent: Usage{4, 48 << 10}, ParentController: Usage{4, 48 << 10}, ParentControllers: 1,
			Total: 20, Controllers: 3, Size: 4 << 10}, want: QuotaParentBytes},
		{name: "past the parent's records, another of its controllers under its share still records",
			facts: QuotaFacts{Parent: Usage{5, 5 << 10}, ParentControllers: 2, Total: 20, Controllers: 3, Size: 1 << 10}},
		{name: "past the parent's records, a controller at its share does not",
			facts: QuotaFacts{Controller: Usage{3, 3 << 10}, Parent: Usage{7, 7 << 10}, ParentController: Usage{3, 3 << 10}, ParentControllers: 2,
				Total: 20, Controllers: 3, Size: 1 << 10}, want: QuotaParentRecords},
		{name: "at twice the parent's records, a writer with less than a fifth of them still records",
			facts: QuotaFacts{Parent: Usage{10, 10 << 10}, ParentControllers: 6, Total: 20, Controllers: 6, Size: 1 << 10}},
		{name: "at twice the parent's records, a writer with a fifth of them does not",
			facts: QuotaFacts{Parent: Usage{10, 10 << 10}, ParentController: Usage{1, 1 << 10}, ParentControllers: 6, Total: 20, Controllers: 6, Size: 1 << 10},
			want:  QuotaParentRecords},
		{name: "at three times the parent's records, nobody records",
			facts: QuotaFacts{Parent: Usage{15, 15 << 10}, ParentControllers: 9, Total: 20, Controllers: 9, Size: 1 << 10}, want: QuotaParentRecords},
		{name: "past the parent's bytes, another of its controllers under its share still records",
			facts: QuotaFacts{Parent: Usage{4, 48 << 10}, ParentControllers: 2, Total: 20, Controllers: 3, Size: 4 << 10}},
		{name: "at three times the parent's bytes, nobody records",
			facts: QuotaFacts{Parent: Usage{4, 148 << 10}, ParentControllers: 2, Total: 20, Controllers: 3, Size: 4 << 10}, want: QuotaParentBytes},
		{name: "past the total, a controller under its share still records",
			facts: QuotaFacts{Controller: Usage{0, 0}, Total: 100, Controllers: 11, Size: 1 << 10}},
		{name: "past the total, a controller at its share does not",
			facts: QuotaFacts{Controller: Usage{9, 9 << 10}, Total: 100, Controllers: 11, Size: 1 << 10}, want: QuotaTotal},
		{name: "past the total, a namespace at its share does not, though its controller is under its own",
			facts: QuotaFacts{Controller: Usage{1, 1 << 10}, Namespace: Usage{50, 50 << 10}, Total: 100, Controllers: 60, Namespaces: 2, Size: 1 << 10},
			want:  QuotaNamespaceShare},
		{name: "past the total, another namespace under its share records",
			facts: QuotaFacts{Controller: Usage{0, 0}, Namespace: Usage{0, 0}, Total: 100, Controllers: 61, Namespaces: 2, Size: 1 << 10}},
		{name: "at twice the total, nobody records",
			facts: QuotaFacts{Controller: Usage{0, 0}, Total: 200, Controllers: 30, Size: 1 << 10}, want: QuotaTotal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Admit(q, tc.facts); got != tc.want {
				t.Errorf("Admit = %q, want %q", got, tc.want)
			}
		})
	}
}

// detectedWrite is a denied create of ConfigMap name under Deployment
// parent by user.
func detectedWrite(parent, name, userName string) (*decision.Decision, notify.Write) {
	d := &decision.Decision{
		Child:  decision.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name},
		Parent: &decision.ParentInfo{Ref: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: parent}, UID: "uid-" + parent},
		Report: decision.ReportDetected,
	}
	return d, notify.Write{Operation: decision.Create, User: &user.DefaultInfo{Name: userName}}
}

func TestAControllersFloodIsRateLimitedAndReportedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	l, err := New(Options{Client: fake.NewClientset(), Objects: &noObjects{}, Log: zap.New(core), Clock: clock, Registerer: reg,
		ControllerBurst: 5, ControllerRate: 1, FloodQuiet: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		d, w := detectedWrite("web", "flood-"+strconv.Itoa(i), "flooder")
		l.Observe(d, w, nil)
	}
	d, w := detectedWrite("db", "cm", "other")
	l.Observe(d, w, nil)

	if got := len(l.intake); got != 6 {
		t.Errorf("%d drifts queued for recording, want the flooder's burst of 5 and the other controller's", got)
	}
	var others int
	for range len(l.intake) {
		if rec := <-l.intake; rec.Report.Spec.Request.User == "other" {
			others++
		}
	}
	if others != 1 {
		t.Errorf("the other controller's drift was queued %d times, want once", others)
	}
	if n := logs.FilterMessageSnippet("are suppressed").Len(); n != 1 {
		t.Errorf("%d warnings about the flood, want 1", n)
	}
	if v := testutil.ToFloat64(l.m.floods.WithLabelValues(QuotaRate)); v != 1 {
		t.Errorf("floods_total{quota=rate} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(l.m.suppressedByQuota.WithLabelValues(QuotaRate)); v != 195 {
		t.Errorf("quota_suppressed_total{quota=rate} = %v, want 195", v)
	}

	// Within the quiet period the flood goes on; after it, a suppression
	// is a new flood.
	clock.Step(30 * time.Second)
	l.suppress(QuotaRate, &Record{Report: v1alpha1.DriftReport{Spec: v1alpha1.DriftReportSpec{Request: v1alpha1.RequestInfo{User: "flooder"}}}})
	if n := logs.FilterMessageSnippet("are suppressed").Len(); n != 1 {
		t.Errorf("%d warnings within the flood, want 1", n)
	}
	clock.Step(2 * time.Minute)
	l.endQuietFloods()
	if n := logs.FilterMessageSnippet("no longer suppressed").Len(); n != 1 {
		t.Errorf("%d lines about the end of the flood, want 1", n)
	}
	l.suppress(QuotaRate, &Record{Report: v1alpha1.DriftReport{Spec: v1alpha1.DriftReportSpec{Request: v1alpha1.RequestInfo{User: "flooder"}}}})
	if n := logs.FilterMessageSnippet("are suppressed").Len(); n != 2 {
		t.Errorf("%d warnings after a new flood, want 2", n)
	}
}

func TestRecordsStayWithinTheControllersQuota(t *testing.T) {
	client := fake.NewClientset()
	reg := prometheus.NewRegistry()
	l, err := New(Options{Client: client, Objects: &noObjects{}, Registerer: reg, Namespace: "kausality-system",
		Quotas: Quotas{ControllerRecords: 3, ParentRecords: 100}})
	if err != nil {
		t.Fatal(err)
	}
	record := func(parent, name, userName string) {
		d, w := detectedWrite(parent, name, userName)
		r := notify.FromDecision(d, w)
		l.create(t.Context(), &Record{Name: RecordName(r.Spec.ID), Report: summarize(r)}, 0)
	}
	for i := range 10 {
		record("web-"+strconv.Itoa(i), "flood-"+strconv.Itoa(i), "flooder")
	}
	record("db", "cm", "other")
	byUser := recordsByUser(t, client)
	if byUser["flooder"] != 3 || byUser["other"] != 1 {
		t.Errorf("records by controller %v, want the flooder's quota of 3 and the other controller's 1", byUser)
	}
	if v := testutil.ToFloat64(l.m.suppressedByQuota.WithLabelValues(QuotaControllerRecords)); v != 7 {
		t.Errorf("quota_suppressed_total{quota=controller_records} = %v, want 7", v)
	}
}

// A writer counted as a parent's controller (a second recorded controller,
// or, while no record names one, whoever sends its field manager) cannot
// use up the parent's quota and silence its real controller.
func TestAParentsQuotaIsSharedByItsControllers(t *testing.T) {
	client := fake.NewClientset()
	reg := prometheus.NewRegistry()
	l, err := New(Options{Client: client, Objects: &noObjects{}, Registerer: reg, Namespace: "kausality-system",
		Quotas: Quotas{ControllerRecords: 100, ParentRecords: 4}})
	if err != nil {
		t.Fatal(err)
	}
	record := func(name, userName string) {
		d, w := detectedWrite("web", name, userName)
		r := notify.FromDecision(d, w)
		l.create(t.Context(), &Record{Name: RecordName(r.Spec.ID), Report: summarize(r)}, 0)
	}
	for i := range 10 {
		record("intruder-"+strconv.Itoa(i), "intruder")
	}
	for i := range 10 {
		record("controller-"+strconv.Itoa(i), "controller")
	}
	byUser := recordsByUser(t, client)
	if byUser["intruder"] != 4 || byUser["controller"] != 2 {
		t.Errorf("records of the parent by writer %v, want the intruder's 4 (the quota, alone) and the controller's share of 2", byUser)
	}
}

// recordsByUser counts the drift records by the user whose write drifted.
func recordsByUser(t *testing.T, client *fake.Clientset) map[string]int {
	t.Helper()
	list, err := client.CoreV1().ConfigMaps("kausality-system").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byUser := map[string]int{}
	for _, cm := range list.Items {
		r, err := decode(&cm)
		if err != nil {
			t.Fatal(err)
		}
		byUser[r.Report.Spec.Request.User]++
	}
	return byUser
}
