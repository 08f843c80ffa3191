package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/report/drifts"
)

var driftsNow = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// recordConfigMap is a drift record as the proxy writes it.
func recordConfigMap(t *testing.T, id, ns, child string, mode annotations.DriftMode, held bool, age time.Duration, resolved bool, changes ...desired.Change) *corev1.ConfigMap {
	t.Helper()
	rep := v1alpha1.DriftReport{APIVersion: v1alpha1.DriftReportAPIVersion, Kind: v1alpha1.DriftReportKind, Spec: v1alpha1.DriftReportSpec{
		ID: id, Phase: v1alpha1.PhaseDetected,
		Parent:  v1alpha1.ParentRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "web", Generation: 4, ObservedGeneration: 4},
		Child:   v1alpha1.ChildRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: ns, Name: child},
		Request: v1alpha1.RequestInfo{User: "system:serviceaccount:kube-system:deployment-controller"},
		Changes: changes,
		NewObject: runtime.RawExtension{Raw: []byte(`{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"` + child +
			`","annotations":{"kausality.io/trace":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"web\",\"generation\":4,\"user\":\"alice\"},{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"` + child + `\",\"generation\":2}]"}}}`)},
	}}
	st := drifts.State{DetectedAt: metav1.NewTime(driftsNow.Add(-age)), Mode: mode, Held: held}
	if resolved {
		st.Resolved = &drifts.Resolution{Reason: v1alpha1.ReasonApproved, At: metav1.NewTime(driftsNow)}
	}
	r, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	s, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: drifts.RecordName(id), Namespace: "kausality-system"},
		Data: map[string]string{"report": string(r), "state": string(s)}}
}

func replicas(old, new string) desired.Change {
	return desired.Change{Path: "spec.replicas", Old: old, New: new}
}

func sampleRecords(t *testing.T) []*corev1.ConfigMap {
	return []*corev1.ConfigMap{
		recordConfigMap(t, "0000000000000002", "shop", "web-2", annotations.ModeLog, false, 3*time.Minute, false, replicas("3", "2")),
		recordConfigMap(t, "0000000000000001", "shop", "web-1", annotations.ModeEnforce, true, 2*time.Hour, false, replicas("3", "2"),
			desired.Change{Path: "spec.template.spec.containers[name=app].image", Old: `"nginx:1.27"`, New: `"nginx:1.28"`}),
		recordConfigMap(t, "0000000000000003", "shop", "web-3", annotations.ModeShadow, false, 10*time.Second, false, desired.Change{Path: "spec.template"}),
		recordConfigMap(t, "0000000000000004", "shop", "web-4", annotations.ModeEnforce, true, time.Minute, true, replicas("5", "2")),
		recordConfigMap(t, "0000000000000005", "other", "api-1", annotations.ModeEnforce, true, time.Minute, false, replicas("1", "2")),
		{ObjectMeta: metav1.ObjectMeta{Name: "kausality-drift-broken"}, Data: map[string]string{"report": "{", "state": "{}"}},
	}
}

// The list for scripts: resolved drifts left out, the filters applied,
// an unparsable record one line.
func TestPrintDriftsGolden(t *testing.T) {
	tests := []struct {
		name   string
		filter driftFilter
		output string
	}{
		{name: "namespace", filter: driftFilter{namespace: "shop"}},
		{name: "all-namespaces", filter: driftFilter{}},
		{name: "enforce-only", filter: driftFilter{namespace: "shop", mode: annotations.ModeEnforce}},
		{name: "controller-nobody", filter: driftFilter{controller: "replicaset-controller"}},
		{name: "json", filter: driftFilter{namespace: "shop"}, output: "json"},
		{name: "yaml", filter: driftFilter{namespace: "other"}, output: "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			o := &options{out: &buf, output: tt.output, now: func() time.Time { return driftsNow }}
			rows, problems := rowsOf(sampleRecords(t), tt.filter)
			if err := o.printDriftRows(rows, problems, tt.filter.namespace == ""); err != nil {
				t.Fatal(err)
			}
			golden(t, "drifts-"+tt.name, buf.String())
		})
	}
}

func TestRowsOfSkipsResolvedAndSortsOldestFirst(t *testing.T) {
	rows, problems := rowsOf(sampleRecords(t), driftFilter{namespace: "shop"})
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, ","); got != "0000000000000001,0000000000000002,0000000000000003" {
		t.Errorf("rows %s", got)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "kausality-drift-broken") {
		t.Errorf("problems %q", problems)
	}
	if len(rows[0].Trace) != 2 || rows[0].Trace[0].User != "alice" {
		t.Errorf("trace %+v", rows[0].Trace)
	}
}
