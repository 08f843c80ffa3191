package intercept

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/sidewrites"
)

// Each write's decision is counted under its own labels, whether its
// series was resolved before or not.
func TestDecisionMetricsLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	replicaSets := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	writes := []struct {
		gvr        schema.GroupVersionResource
		controller string
		shadow     bool
		d          decision.Decision
	}{
		{replicaSets, "deployment", false, decision.Decision{Result: decision.Allow, Category: decision.Expected, Mode: "enforce"}},
		{replicaSets, "deployment", false, decision.Decision{Result: decision.Allow, Category: decision.Expected, Mode: "enforce"}},
		{replicaSets, "deployment", true, decision.Decision{Result: decision.Allow, Category: decision.Expected, Mode: "enforce"}},
		{configMaps, "", false, decision.Decision{Result: decision.Deny, Category: decision.NewOrigin, Mode: "enforce"}},
	}
	for _, w := range writes {
		rq := &writeRequest{w: &write{gvr: w.gvr}, controllerName: w.controller, shadow: w.shadow}
		m.observe(rq, &w.d, time.Millisecond)
	}
	want := `
# HELP kausality_proxy_decisions_total Decisions about intercepted writes, by result, category, mode, configured controller, resource and whether the controller is in shadow mode.
# TYPE kausality_proxy_decisions_total counter
kausality_proxy_decisions_total{category="NewOrigin",controller="",decision="Deny",mode="enforce",resource="configmaps",shadow="false"} 1
kausality_proxy_decisions_total{category="Expected",controller="deployment",decision="Allow",mode="enforce",resource="apps/replicasets",shadow="false"} 2
kausality_proxy_decisions_total{category="Expected",controller="deployment",decision="Allow",mode="enforce",resource="apps/replicasets",shadow="true"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kausality_proxy_decisions_total"); err != nil {
		t.Error(err)
	}
	observations := map[string]uint64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "kausality_proxy_decision_duration_seconds" {
			continue
		}
		for _, series := range f.GetMetric() {
			var labels []string
			for _, l := range series.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			observations[strings.Join(labels, ",")] = series.GetHistogram().GetSampleCount()
		}
	}
	wantObservations := map[string]uint64{"category=Expected,shadow=false": 2, "category=Expected,shadow=true": 1, "category=NewOrigin,shadow=false": 1}
	if !maps.Equal(observations, wantObservations) {
		t.Errorf("latency observations %v, want %v", observations, wantObservations)
	}
}

// Every intercepted write records its decision in the metrics.
func BenchmarkDecisionMetrics(b *testing.B) {
	m := newMetrics(prometheus.NewRegistry())
	rq := &writeRequest{w: &write{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}}, controllerName: "deployment"}
	d := &decision.Decision{Result: decision.Allow, Category: decision.Expected, Mode: "enforce"}
	b.ReportAllocs()
	for b.Loop() {
		m.observe(rq, d, time.Millisecond)
	}
}

type noWrites struct{}

func (noWrites) Apply(context.Context, decision.SideWrite) error { return nil }

// The deferred status records waiting, and those dropped at the bound,
// are exported.
func TestDeferredRecordMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := sidewrites.NewDeferred(noWrites{}, clocktesting.NewFakeClock(time.Now()), time.Second, 1, nil)
	registerDeferredMetrics(reg, d)
	record := func(uid types.UID) decision.SideWrite {
		return decision.SideWrite{AnnotationChanges: decision.AnnotationChanges{Set: map[string]string{"kausality.io/observedGeneration": "2"}},
			Deferred: true, TargetUID: uid, Delay: time.Minute}
	}
	d.Schedule(record("a"))
	d.Schedule(record("b"))
	want := `
# HELP kausality_proxy_deferred_status_records Observed-generation records of status writes that named no resourceVersion, waiting out --unbound-status-record-delay in this replica.
# TYPE kausality_proxy_deferred_status_records gauge
kausality_proxy_deferred_status_records 1
# HELP kausality_proxy_deferred_status_records_dropped_total Deferred observed-generation records dropped because too many were waiting; each parent stays unsettled until a later status write.
# TYPE kausality_proxy_deferred_status_records_dropped_total counter
kausality_proxy_deferred_status_records_dropped_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
