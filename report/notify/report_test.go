package notify

import (
	"encoding/json"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/lifecycle"
)

func TestID(t *testing.T) {
	p := decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web"}
	c := decision.ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "ns", Name: "web-1"}
	a := desired.Change{Path: "spec.replicas", Old: "1", New: "3"}
	b := desired.Change{Path: "spec.template"}
	base := ID(p, c, []desired.Change{a, b})

	with := func(f func(p, c *decision.ObjectRef)) (decision.ObjectRef, decision.ObjectRef) {
		p2, c2 := p, c
		f(&p2, &c2)
		return p2, c2
	}
	tests := []struct {
		name    string
		parent  decision.ObjectRef
		child   decision.ObjectRef
		changes []desired.Change
		same    bool
	}{
		{"identical", p, c, []desired.Change{a, b}, true},
		{"changes reordered", p, c, []desired.Change{b, a}, true},
		{"duplicate change", p, c, []desired.Change{a, b, a}, true},
		{"other API version of the same group", func() decision.ObjectRef { x := p; x.APIVersion = "apps/v1beta2"; return x }(), c, []desired.Change{a, b}, true},
		{"other new value", p, c, []desired.Change{{Path: "spec.replicas", Old: "1", New: "4"}, b}, false},
		{"fewer changes", p, c, []desired.Change{a}, false},
		{"no changes", p, c, nil, false},
		{"other child", p, func() decision.ObjectRef { x := c; x.Name = "web-2"; return x }(), []desired.Change{a, b}, false},
		{"other child namespace", p, func() decision.ObjectRef { x := c; x.Namespace = "other"; return x }(), []desired.Change{a, b}, false},
		{"other parent", func() decision.ObjectRef { x := p; x.Name = "api"; return x }(), c, []desired.Change{a, b}, false},
		{"other group", func() decision.ObjectRef { x := p; x.APIVersion = "example.com/v1"; return x }(), c, []desired.Change{a, b}, false},
		{"parent and child swapped", c, p, []desired.Change{a, b}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ID(tt.parent, tt.child, tt.changes)
			if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(got) {
				t.Fatalf("ID = %q, want 16 hex digits", got)
			}
			if got != ID(tt.parent, tt.child, tt.changes) {
				t.Fatal("ID is not deterministic")
			}
			if (got == base) != tt.same {
				t.Errorf("ID = %s, base %s, want same=%v", got, base, tt.same)
			}
		})
	}
	// Field contents cannot shift across field boundaries.
	p1, c1 := with(func(p, c *decision.ObjectRef) { p.Name = "web/ns" })
	p2, c2 := with(func(p, c *decision.ObjectRef) { p.Name, p.Namespace = "ns", "web/ns" })
	if ID(p1, c1, nil) == ID(p2, c2, nil) {
		t.Error("different references give the same id")
	}
	// Golden: the id is part of the wire contract (receivers store it).
	if want := "8aae3789a744c7bc"; base != want {
		t.Errorf("ID changed: got %s, want %s", base, want)
	}
}

func TestFromDecisionPayload(t *testing.T) {
	old := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"name": "web-1", "namespace": "ns", "uid": "uid-1", "generation": int64(3)},
		"spec":     map[string]any{"replicas": int64(1)},
	}}
	upd := old.DeepCopy()
	upd.Object["spec"] = map[string]any{"replicas": int64(3)}
	created := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"name": "web-1", "namespace": "ns"},
	}}
	d := &decision.Decision{
		Result: decision.Deny, Category: decision.DriftUnapproved, Drift: true, Report: decision.ReportDetected,
		Child: decision.ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "ns", Name: "web-1"},
		Parent: &decision.ParentInfo{
			Ref: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web"},
			UID: "puid", Generation: 5, ObservedGeneration: 5, ObservedGenerationSource: "status.observedGeneration",
			Phase: lifecycle.Initialized,
		},
		Actor: decision.Actor{User: "ctrl", FieldManager: "kube-controller-manager", IsController: true, Determined: true,
			ControllerManagers: []string{"kube-controller-manager"}},
	}
	u := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:deployment-controller", UID: "u-1",
		Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	changes := []desired.Change{replicas(1, 3)}

	tests := []struct {
		name      string
		w         Write
		wantOld   bool
		wantNew   bool
		wantUID   string
		wantChild int64
	}{
		{"update", Write{Operation: decision.Update, OldObject: old, NewObject: upd, Changes: changes, User: u, FieldManager: "kube-controller-manager"}, true, true, "uid-1", 3},
		{"create", Write{Operation: decision.Create, NewObject: created, Changes: changes, User: u, FieldManager: "kube-controller-manager"}, false, true, "", 0},
		{"delete", Write{Operation: decision.Delete, OldObject: old, Changes: changes, User: u, FieldManager: "kube-controller-manager"}, true, false, "uid-1", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := FromDecision(d, tt.w)
			wantID := ID(d.Parent.Ref, d.Child, changes)
			if r.Spec.ID != wantID {
				t.Fatalf("id = %s, want %s", r.Spec.ID, wantID)
			}
			body, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var raw map[string]any
			if err := json.Unmarshal(body, &raw); err != nil {
				t.Fatal(err)
			}
			if raw["apiVersion"] != "kausality.io/v1alpha1" || raw["kind"] != "DriftReport" {
				t.Errorf("TypeMeta = %v %v", raw["apiVersion"], raw["kind"])
			}
			if _, ok := raw["metadata"]; ok {
				t.Error("a DriftReport has no metadata")
			}
			spec := raw["spec"].(map[string]any)
			if spec["id"] != wantID || spec["phase"] != "Detected" {
				t.Errorf("id, phase = %v, %v", spec["id"], spec["phase"])
			}
			wantParent := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "ns", "name": "web", "uid": "puid",
				"generation": 5.0, "observedGeneration": 5.0, "controllerManager": "kube-controller-manager", "lifecyclePhase": "Initialized"}
			assertJSONEqual(t, "parent", spec["parent"], wantParent)
			wantChild := map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "ns", "name": "web-1"}
			if tt.wantUID != "" {
				wantChild["uid"], wantChild["generation"] = tt.wantUID, float64(tt.wantChild)
			}
			assertJSONEqual(t, "child", spec["child"], wantChild)
			wantReq := map[string]any{"user": u.Name, "uid": "u-1", "groups": []any{"system:serviceaccounts", "system:authenticated"},
				"fieldManager": "kube-controller-manager", "operation": string(tt.w.Operation), "dryRun": false}
			assertJSONEqual(t, "request", spec["request"], wantReq)
			assertJSONEqual(t, "changes", spec["changes"], []any{map[string]any{"path": "spec.replicas", "old": "1", "new": "3"}})

			oldObj, hasOld := spec["oldObject"]
			if hasOld != tt.wantOld {
				t.Errorf("oldObject present = %v, want %v", hasOld, tt.wantOld)
			}
			if tt.wantOld {
				assertJSONEqual(t, "oldObject", oldObj, old.Object)
			}
			newObj, hasNew := spec["newObject"]
			if !hasNew {
				t.Error("newObject is always present")
			}
			switch {
			case tt.wantNew && tt.w.NewObject != nil:
				assertJSONEqual(t, "newObject", newObj, tt.w.NewObject.Object)
			case !tt.wantNew && newObj != nil:
				t.Errorf("newObject = %v, want null", newObj)
			}
		})
	}
}

func assertJSONEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var gv, wv any
	_ = json.Unmarshal(g, &gv)
	_ = json.Unmarshal(w, &wv)
	gb, _ := json.Marshal(gv)
	wb, _ := json.Marshal(wv)
	if string(gb) != string(wb) {
		t.Errorf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

func TestFromDecisionControllerManagerFallback(t *testing.T) {
	d := &decision.Decision{Report: decision.ReportDetected,
		Parent: &decision.ParentInfo{Ref: decision.ObjectRef{APIVersion: "v1", Kind: "X", Name: "p"}},
		Actor:  decision.Actor{User: "ctrl", FieldManager: "mgr", IsController: true}}
	r := FromDecision(d, Write{})
	if r.Spec.Parent.ControllerManager != "mgr" || r.Spec.Request.User != "ctrl" || r.Spec.Request.FieldManager != "mgr" {
		t.Errorf("got %+v / %+v", r.Spec.Parent, r.Spec.Request)
	}
	d.Report = decision.ReportNone
	if r := FromDecision(d, Write{}); r.Spec.Phase != "" || r.Spec.ID != "" {
		t.Errorf("no report: phase %q id %q", r.Spec.Phase, r.Spec.ID)
	}
}
