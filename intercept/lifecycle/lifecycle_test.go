package lifecycle

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func obj(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return u
}

const head = `"apiVersion":"apps/v1","kind":"Deployment"`

func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		obj     string
		phase   Phase
		reason  string
		persist bool
	}{
		{"deleting beats everything", `{` + head + `,"metadata":{"name":"a","deletionTimestamp":"2026-01-01T00:00:00Z","annotations":{"kausality.io/phase":"initialized"}},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			Deleting, "deletionTimestamp set", false},
		{"high-water mark", `{` + head + `,"metadata":{"name":"a","annotations":{"kausality.io/phase":"initialized"}},"status":{"conditions":[{"type":"Ready","status":"False"}]}}`,
			Initialized, "annotation kausality.io/phase=initialized", false},
		{"phase initializing annotation is not a mark", `{` + head + `,"metadata":{"name":"a","annotations":{"kausality.io/phase":"initializing"}}}`,
			Initializing, "no initialization signal", false},
		{"legacy mark", `{` + head + `,"metadata":{"name":"a","annotations":{"kausality.io/initialized":"true"}}}`,
			Initialized, "annotation kausality.io/initialized=true", true},
		{"Initialized condition", `{` + head + `,"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"False"},{"type":"Initialized","status":"True"}]}}`,
			Initialized, "condition Initialized=True", true},
		{"Ready condition", `{` + head + `,"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			Initialized, "condition Ready=True", true},
		{"Ready unknown", `{` + head + `,"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"Unknown"}]}}`,
			Initializing, "no initialization signal", false},
		{"Deployment Available with observedGeneration", `{` + head + `,"metadata":{"name":"a","generation":3},"status":{"observedGeneration":3,"conditions":[{"type":"Progressing","status":"True"},{"type":"Available","status":"True"}]}}`,
			Initialized, "status.observedGeneration with condition Available=True", true},
		{"Available without observedGeneration", `{` + head + `,"metadata":{"name":"a"},"status":{"conditions":[{"type":"Available","status":"True"}]}}`,
			Initializing, "no initialization signal", false},
		{"Available with the observed generation the proxy recorded (the operator-sdk's memcached sample)", `{` + head + `,"metadata":{"name":"a","generation":2,"annotations":{"kausality.io/observedGeneration":"2"}},"status":{"conditions":[{"type":"Available","status":"True"}]}}`,
			Initialized, "kausality.io/observedGeneration with condition Available=True", true},
		{"Available Unknown with the recorded generation", `{` + head + `,"metadata":{"name":"a","generation":1,"annotations":{"kausality.io/observedGeneration":"1"}},"status":{"conditions":[{"type":"Available","status":"Unknown"}]}}`,
			Initializing, "no initialization signal", false},
		{"observedGeneration alone", `{` + head + `,"metadata":{"name":"a"},"status":{"observedGeneration":1}}`,
			Initializing, "no initialization signal", false},
		{"Synced only (Crossplane creating children)", `{` + head + `,"metadata":{"name":"a"},"status":{"conditions":[{"type":"Synced","status":"True","observedGeneration":1},{"type":"Ready","status":"False"}]}}`,
			Initializing, "no initialization signal", false},
		{"no status", `{` + head + `,"metadata":{"name":"a"}}`, Initializing, "no initialization signal", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Detect(obj(t, tt.obj))
			if got != (Result{Phase: tt.phase, Reason: tt.reason, Persist: tt.persist}) {
				t.Errorf("got %+v", got)
			}
		})
	}
}

func TestDetectPerGVK(t *testing.T) {
	d := &Detector{
		Order: []Check{CheckInitialized},
		ByGVK: map[schema.GroupVersionKind][]Check{
			{Group: "example.com", Version: "v1", Kind: "Cluster"}: {"Condition=Synced"},
			{Group: "example.com", Kind: "Pool"}:                   {CheckObservedGeneration},
		},
	}
	ready := `,"metadata":{"name":"a"},"status":{"observedGeneration":2,"conditions":[{"type":"Ready","status":"True"},{"type":"Synced","status":"True"}]}}`
	tests := []struct {
		apiVersion, kind string
		want             Result
	}{
		// Default order here only knows Initialized=True.
		{"apps/v1", "Deployment", Result{Phase: Initializing, Reason: "no initialization signal"}},
		{"example.com/v1", "Cluster", Result{Phase: Initialized, Reason: "condition Synced=True", Persist: true}},
		{"example.com/v2", "Cluster", Result{Phase: Initializing, Reason: "no initialization signal"}},
		// Version-less key matches every version.
		{"example.com/v7", "Pool", Result{Phase: Initialized, Reason: "status.observedGeneration with condition Ready=True", Persist: true}},
	}
	for _, tt := range tests {
		got := d.Detect(obj(t, `{"apiVersion":"`+tt.apiVersion+`","kind":"`+tt.kind+`"`+ready))
		if got != tt.want {
			t.Errorf("%s %s: got %+v", tt.apiVersion, tt.kind, got)
		}
	}
}

func TestCheckValidate(t *testing.T) {
	for _, c := range []Check{CheckInitialized, CheckReady, CheckObservedGeneration, "Condition=Synced"} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	for _, c := range []Check{"", "Ready", "Condition="} {
		if err := c.Validate(); err == nil {
			t.Errorf("%q must be invalid", c)
		}
	}
}

func TestObservedGeneration(t *testing.T) {
	tests := []struct {
		name string
		obj  string
		gen  int64
		src  string
		ok   bool
	}{
		{"status", `{` + head + `,"metadata":{"name":"a","annotations":{"kausality.io/observedGeneration":"9"}},"status":{"observedGeneration":4,"conditions":[{"type":"Synced","status":"True","observedGeneration":2}]}}`, 4, SourceStatus, true},
		{"Synced condition", `{` + head + `,"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":3},{"type":"Synced","status":"True","observedGeneration":2}]}}`, 2, SourceCondition, true},
		{"Ready condition", `{` + head + `,"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":3}]}}`, 3, SourceCondition, true},
		{"annotation", `{` + head + `,"metadata":{"name":"a","annotations":{"kausality.io/observedGeneration":"7"}},"status":{}}`, 7, SourceAnnotation, true},
		{"bad annotation", `{` + head + `,"metadata":{"name":"a","annotations":{"kausality.io/observedGeneration":"x"}}}`, 0, "", false},
		{"none", `{` + head + `,"metadata":{"name":"a"}}`, 0, "", false},
	}
	for _, tt := range tests {
		gen, src, ok := ObservedGeneration(obj(t, tt.obj))
		if gen != tt.gen || src != tt.src || ok != tt.ok {
			t.Errorf("%s: got %d %q %v", tt.name, gen, src, ok)
		}
	}
	// Numbers decoded by encoding/json are float64.
	var m map[string]interface{}
	_ = json.Unmarshal([]byte(`{"status":{"observedGeneration":5}}`), &m)
	if g, ok := StatusObservedGeneration(&unstructured.Unstructured{Object: m}); g != 5 || !ok {
		t.Errorf("float64: %d %v", g, ok)
	}
	if HasStatusObservedGeneration(obj(t, `{`+head+`,"metadata":{"name":"a","annotations":{"kausality.io/observedGeneration":"7"}}}`)) {
		t.Error("annotation is not a status observedGeneration")
	}
	if !ConditionTrue(obj(t, `{`+head+`,"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`), "Ready") {
		t.Error("ConditionTrue")
	}
}

func TestObservedGenerationCurrent(t *testing.T) {
	d := &Detector{ByGVK: map[schema.GroupVersionKind][]Check{{Group: "apps", Kind: "ReplicaSet"}: {CheckObservedGenerationCurrent}}}
	cases := []struct {
		name string
		obj  map[string]interface{}
		want Phase
	}{
		{"caught up", map[string]interface{}{"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": map[string]interface{}{"generation": int64(2)}, "status": map[string]interface{}{"observedGeneration": int64(2)}}, Initialized},
		{"behind", map[string]interface{}{"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": map[string]interface{}{"generation": int64(3)}, "status": map[string]interface{}{"observedGeneration": int64(2)}}, Initializing},
		{"no status", map[string]interface{}{"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": map[string]interface{}{"generation": int64(1)}}, Initializing},
		{"other kind keeps the default order", map[string]interface{}{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": map[string]interface{}{"generation": int64(2)}, "status": map[string]interface{}{"observedGeneration": int64(2)}}, Initializing},
	}
	for _, tc := range cases {
		if got := d.Detect(&unstructured.Unstructured{Object: tc.obj}).Phase; got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if err := CheckObservedGenerationCurrent.Validate(); err != nil {
		t.Fatal(err)
	}
}
