package drifts

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// longTrace is a trace annotation of n hops with long names.
func longTrace(n int) string {
	t := make(trace.Trace, n)
	for i := range t {
		t[i] = trace.Hop{APIVersion: "apps/v1", Kind: "Deployment", Name: strings.Repeat("n", 1000) + strconv.Itoa(i), Generation: int64(i),
			User: "u", Timestamp: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC), Labels: map[string]string{"a": "1", "b": "2"}}
	}
	return t.Encode()
}

func TestSummarizeBoundsARecord(t *testing.T) {
	huge := strings.Repeat("x", 400<<10)
	bigObject := func(kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind,
			"metadata": map[string]any{"name": "cm", "namespace": "ns", "uid": "u1", "generation": int64(2),
				"annotations": map[string]any{"kausality.io/trace": longTrace(40), "blob": huge}},
			"data": map[string]any{"key": huge}}}
		return u
	}
	manyChanges := make([]desired.Change, 500)
	for i := range manyChanges {
		manyChanges[i] = desired.Change{Path: "data." + strings.Repeat("k", 2000) + strconv.Itoa(i), Old: `"` + huge[:1000], New: `"` + huge[:1000]}
	}
	for _, tc := range []struct {
		name   string
		report func(*v1alpha1.DriftReport)
		// wantTrace: hops of the trace kept in newObject.
		wantTrace int
	}{
		{name: "a 400 KB object", wantTrace: maxTraceHops, report: func(r *v1alpha1.DriftReport) {
			r.Spec.NewObject = runtime.RawExtension{Object: bigObject("ConfigMap")}
		}},
		{name: "both objects raw", wantTrace: maxTraceHops, report: func(r *v1alpha1.DriftReport) {
			b, _ := json.Marshal(bigObject("ConfigMap").Object)
			r.Spec.NewObject, r.Spec.OldObject = runtime.RawExtension{Raw: b}, runtime.RawExtension{Raw: b}
		}},
		{name: "many long changes", wantTrace: -1, report: func(r *v1alpha1.DriftReport) {
			r.Spec.NewObject = runtime.RawExtension{Object: bigObject("ConfigMap")}
			r.Spec.Changes = manyChanges
		}},
		{name: "a user with long names and many groups", wantTrace: -1, report: func(r *v1alpha1.DriftReport) {
			r.Spec.NewObject = runtime.RawExtension{Object: bigObject("ConfigMap")}
			r.Spec.Changes = manyChanges
			r.Spec.Request.User = strings.Repeat("\x00", 100000)
			for range 1000 {
				r.Spec.Request.Groups = append(r.Spec.Request.Groups, strings.Repeat("\x01", 10000))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := openRecord()
			tc.report(&r.Report)
			r.Report = summarize(r.Report)
			cm, err := encode(r, "ns")
			if err != nil {
				t.Fatal(err)
			}
			if n := recordBytes(cm); n > MaxRecordBytes-maxStateBytes {
				t.Fatalf("the record holds %d bytes, more than %d", n, MaxRecordBytes-maxStateBytes)
			}
			got, err := decode(cm)
			if err != nil {
				t.Fatal(err)
			}
			obj := notify.ObjectOf(got.Report.Spec.NewObject)
			if obj == nil || obj.GetName() != "cm" || obj.GetUID() != "u1" || obj.GetGeneration() != 2 {
				t.Fatalf("the new object's identity was not kept: %v", obj)
			}
			if _, found := obj.Object["data"]; found || obj.GetAnnotations()["blob"] != "" {
				t.Errorf("the record keeps the object's content: %v", obj.Object)
			}
			hops, _ := trace.Parse(obj.GetAnnotations()["kausality.io/trace"])
			if tc.wantTrace >= 0 && len(hops) != tc.wantTrace {
				t.Errorf("%d trace hops kept, want %d", len(hops), tc.wantTrace)
			}
			if len(hops) > 0 && hops[len(hops)-1].Generation != 39 {
				t.Errorf("the trace does not end with the last hop: %+v", hops[len(hops)-1])
			}
			if len(got.Report.Spec.Changes) > desired.MaxChanges {
				t.Errorf("%d changes kept", len(got.Report.Spec.Changes))
			}
			for _, c := range got.Report.Spec.Changes {
				if len(c.Path) > maxStringLen || len(c.Old) > maxValueBytes || len(c.New) > maxValueBytes {
					t.Errorf("a change is not truncated: %d, %d, %d bytes", len(c.Path), len(c.Old), len(c.New))
				}
			}
			if got.ID() != r.ID() {
				t.Errorf("the id changed: %s", got.ID())
			}
		})
	}
}

func TestSummarizeKeepsASmallReport(t *testing.T) {
	r := openRecord().Report
	r.Spec.Request = v1alpha1.RequestInfo{User: "system:serviceaccount:kube-system:deployment-controller", Groups: []string{"system:serviceaccounts"}, Operation: "UPDATE"}
	r.Spec.Changes = []desired.Change{{Path: "spec.replicas", Old: "3", New: "5"}}
	got := summarize(r)
	if got.Spec.Request.User != r.Spec.Request.User || len(got.Spec.Request.Groups) != 1 || len(got.Spec.Changes) != 1 || got.Spec.Changes[0] != r.Spec.Changes[0] ||
		got.Spec.Parent != r.Spec.Parent || got.Spec.Child != r.Spec.Child {
		t.Errorf("summarize changed a small report: %+v", got.Spec)
	}
}

func TestSummarizeKeepsNoSecretValue(t *testing.T) {
	secret := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "namespace": "ns",
			"annotations": map[string]any{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"aHVudGVyMg=="}}`}},
		"data": map[string]any{"password": "aHVudGVyMg=="}}}
	r := openRecord().Report
	r.Spec.NewObject = runtime.RawExtension{Object: secret}
	b, err := json.Marshal(summarize(r))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "aHVudGVyMg==") {
		t.Errorf("the record keeps a Secret's value: %s", b)
	}
}

func TestTruncateTo(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{in: "short", n: 10, want: "short"},
		{in: "abcdefghij", n: 10, want: "abcdefghij"},
		{in: "abcdefghijk", n: 10, want: "abcdefg…"},
		{in: "ääääää", n: 8, want: "ää…"},
	} {
		if got := truncateTo(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("truncateTo(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// A record keeps the allowance violations, each string bounded, in a copy:
// the report being summarized belongs to the request.
func TestSummarizeKeepsAllowanceViolations(t *testing.T) {
	long := "spec." + strings.Repeat("f", 4<<10)
	in := v1alpha1.AllowanceVerdict{Mode: "enforce", Violations: []v1alpha1.AllowanceViolation{
		{Field: "spec.template", NeededKind: "ReplicaSet", NeededMutation: "spec.template"},
		{Field: long, NeededKind: "ReplicaSet", NeededMutation: long}}}
	r := v1alpha1.DriftReport{Spec: v1alpha1.DriftReportSpec{ID: "0123456789abcdef", Allowances: &in}}
	got := summarize(r).Spec.Allowances
	if got == nil || got.Mode != "enforce" || len(got.Violations) != 2 || got.Violations[0] != in.Violations[0] {
		t.Fatalf("allowances %+v", got)
	}
	if v := got.Violations[1]; len(v.Field) > maxStringLen || len(v.NeededMutation) > maxStringLen || v.NeededKind != "ReplicaSet" {
		t.Errorf("a long field is kept at %d bytes, want at most %d", len(v.Field), maxStringLen)
	}
	if in.Violations[1].Field != long {
		t.Error("summarize changed the request's report")
	}
}
