package allowance

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

const (
	alice      = "alice@example.com"
	deployCtrl = "system:serviceaccount:kube-system:deployment-controller"
	rsCtrl     = "system:serviceaccount:kube-system:replicaset-controller"
	hpa        = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
)

var (
	person = Subject{User: alice, Groups: []string{"people", "system:authenticated"}}
	// An identity RBAC lets edit Deployments, whom no policy lets initiate.
	intern = Subject{User: "intern", Groups: []string{"system:authenticated"}}
)

func testPolicies(t *testing.T) []*Compiled {
	t.Helper()
	subjects := `  subjects:
  - {kind: Group, name: people, mayInitiate: true}
  - {kind: ServiceAccount, namespace: kube-system, name: horizontal-pod-autoscaler, mayInitiate: true}
  - {kind: ServiceAccount, namespace: kube-system, name: deployment-controller}
`
	return []*Compiled{
		compileYAML(t, policyYAML("scale", `  match:
    kind: Deployment
    fields: ["spec.replicas"]
`+subjects+`  allow:
  - {kind: ReplicaSet, mutations: ["spec.replicas"]}
`)),
		compileYAML(t, policyYAML("rollout", `  match:
    kind: Deployment
    fields: ["spec.template"]
`+subjects+`  allow:
  - {kind: ReplicaSet, mutations: ["create", "delete", "spec.replicas"]}
`)),
		compileYAML(t, policyYAML("ticketed-image", `  match:
    kind: Deployment
    fields: ["spec.template.spec.containers[*].image"]
    cel: ["has(object.metadata.annotations) && has(object.metadata.annotations.jira)"]
    capture: ["metadata.annotations[jira]", "metadata.annotations[approved-by]"]
`+subjects+`  allow:
  - {kind: ReplicaSet, mutations: ["spec.template.spec.containers[*].image"]}
`)),
		compileYAML(t, policyYAML("replicaset-pods", `  match:
    kind: ReplicaSet
    fields: ["spec.replicas", "spec.template"]
  subjects:
  - {kind: ServiceAccount, namespace: kube-system, name: deployment-controller}
  - {kind: ServiceAccount, namespace: kube-system, name: replicaset-controller}
  allow:
  - {kind: Pod, mutations: ["create", "delete"]}
`)),
		compileYAML(t, policyYAML("broken", `  match:
    kind: Deployment
    fields: ["spec"]
    cel: ["object.("]
  subjects:
  - {kind: Group, name: people, mayInitiate: true}
  allow:
  - {kind: ReplicaSet, mutations: ["spec"]}
`)),
	}
}

type workload struct {
	replicas int64
	images   []string
	ann      map[string]any
}

func (w workload) object(kind, name string) map[string]any {
	var cs []any
	for i, img := range w.images {
		cs = append(cs, map[string]any{"name": "c" + string(rune('0'+i)), "image": img})
	}
	meta := map[string]any{"name": name}
	if w.ann != nil {
		meta["annotations"] = w.ann
	}
	return map[string]any{"apiVersion": "apps/v1", "kind": kind, "metadata": meta,
		"spec": map[string]any{"replicas": w.replicas, "template": map[string]any{"spec": map[string]any{"containers": cs}}}}
}

func deployment(w workload) map[string]any { return w.object("Deployment", "web") }
func replicaSet(w workload) map[string]any { return w.object("ReplicaSet", "web-abc") }

func hop(kind, name string, gen int64, field string) Hop {
	return Hop{Kind: kind, Name: name, Generation: gen, Field: field}
}

func TestInitiate(t *testing.T) {
	base := workload{replicas: 1, images: []string{"nginx:1", "sidecar:1"}}
	scaled := workload{replicas: 3, images: base.images}
	image := workload{replicas: 1, images: []string{"nginx:1", "sidecar:2"}}
	ticketed := image
	ticketed.ann = map[string]any{"jira": "INFRA-23232"}
	initiation := func(s Subject, old, new map[string]any) Change {
		return Change{Subject: s, Kind: "Deployment", Name: "web", Old: old, New: new, Generation: 8}
	}
	imageField := "spec.template.spec.containers[1].image"
	tests := []struct {
		name     string
		change   Change
		want     []Allowance
		policies []string
	}{
		{
			name:   "a person scales: ReplicaSet replica changes, with the field in the trace",
			change: initiation(person, deployment(base), deployment(scaled)),
			want: []Allowance{{Kind: "ReplicaSet", Mutation: "spec.replicas", Generation: 8, Initiator: alice, Policy: "scale",
				Trace: []Hop{hop("Deployment", "web", 8, "spec.replicas")}}},
			policies: []string{"scale"},
		},
		{
			name:   "an autoscaler's /scale is the same change",
			change: initiation(Subject{User: hpa}, deployment(base), deployment(scaled)),
			want: []Allowance{{Kind: "ReplicaSet", Mutation: "spec.replicas", Generation: 8, Initiator: hpa, Policy: "scale",
				Trace: []Hop{hop("Deployment", "web", 8, "spec.replicas")}}},
			policies: []string{"scale"},
		},
		{
			name:   "a subject without mayInitiate initiates nothing",
			change: initiation(intern, deployment(base), deployment(scaled)),
		},
		{
			name:   "nor does the controller itself",
			change: initiation(Subject{User: deployCtrl}, deployment(base), deployment(scaled)),
		},
		{
			name:   "an image change without the ticket: the rollout, not the ticketed policy; the trace names the concrete index",
			change: initiation(person, deployment(base), deployment(image)),
			want: []Allowance{
				{Kind: "ReplicaSet", Mutation: "create", Generation: 8, Initiator: alice, Policy: "rollout", Trace: []Hop{hop("Deployment", "web", 8, imageField)}},
				{Kind: "ReplicaSet", Mutation: "delete", Generation: 8, Initiator: alice, Policy: "rollout", Trace: []Hop{hop("Deployment", "web", 8, imageField)}},
				{Kind: "ReplicaSet", Mutation: "spec.replicas", Generation: 8, Initiator: alice, Policy: "rollout", Trace: []Hop{hop("Deployment", "web", 8, imageField)}},
			},
			policies: []string{"rollout"},
		},
		{
			name:   "with the ticket, the ticketed policy applies too and captures it as an attestation",
			change: initiation(person, deployment(base), deployment(ticketed)),
			want: []Allowance{
				{Kind: "ReplicaSet", Mutation: "create", Generation: 8, Initiator: alice, Policy: "rollout", Trace: []Hop{hop("Deployment", "web", 8, imageField)}},
				{Kind: "ReplicaSet", Mutation: "delete", Generation: 8, Initiator: alice, Policy: "rollout", Trace: []Hop{hop("Deployment", "web", 8, imageField)}},
				{Kind: "ReplicaSet", Mutation: "spec.replicas", Generation: 8, Initiator: alice, Policy: "rollout", Trace: []Hop{hop("Deployment", "web", 8, imageField)}},
				{Kind: "ReplicaSet", Mutation: "spec.template.spec.containers[*].image", Generation: 8, Initiator: alice, Policy: "ticketed-image",
					Trace: []Hop{{Kind: "Deployment", Name: "web", Generation: 8, Field: imageField,
						Attestations: map[string]string{"metadata.annotations[jira]": "INFRA-23232"}}}},
			},
			policies: []string{"rollout", "ticketed-image"},
		},
		{
			name:   "an annotation edit changes no desired state",
			change: initiation(person, deployment(base), deployment(workload{replicas: 1, images: base.images, ann: map[string]any{"x": "y"}})),
		},
		{
			name:   "another kind",
			change: Change{Subject: person, Kind: "StatefulSet", Name: "web", Old: deployment(base), New: deployment(scaled), Generation: 2},
		},
		{
			name:   "a delete initiates nothing",
			change: initiation(person, deployment(base), nil),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := Initiate(context.Background(), testPolicies(t), tt.change)
			if !reflect.DeepEqual(g.Allowances, tt.want) {
				t.Errorf("allowances:\n got  %+v\n want %+v", g.Allowances, tt.want)
			}
			if !reflect.DeepEqual(g.Policies, tt.policies) {
				t.Errorf("policies = %v, want %v", g.Policies, tt.policies)
			}
			if g.Unfinished != "" || len(g.Problems) > 0 {
				t.Errorf("unfinished %q, problems %v", g.Unfinished, g.Problems)
			}
		})
	}
}

// grantedBy initiates a change of the Deployment and returns the parent
// carrying its allowances.
func grantedBy(t *testing.T, s Subject, old, new workload, settled int64) Parent {
	t.Helper()
	g := Initiate(context.Background(), testPolicies(t), Change{Subject: s, Kind: "Deployment", Name: "web", Old: deployment(old), New: deployment(new), Generation: 8})
	return Parent{Kind: "Deployment", Name: "web", Allowances: g.Allowances, SettledGeneration: settled}
}

func TestUse(t *testing.T) {
	base := workload{replicas: 1, images: []string{"nginx:1"}}
	scaled := workload{replicas: 3, images: base.images}
	image := workload{replicas: 1, images: []string{"nginx:2"}}
	controllerWrite := func(old, new map[string]any) Change {
		return Change{Subject: Subject{User: deployCtrl}, Kind: "ReplicaSet", Name: "web-abc", Old: old, New: new, Generation: 5}
	}
	rsScaled := workload{replicas: 3, images: base.images}
	rsTemplate := workload{replicas: 1, images: []string{"evil:1"}}
	tests := []struct {
		name   string
		parent Parent
		write  Change
		// justified: the policy of the allowance chosen for each mutation.
		justified  map[string]string
		violations []string
		says       []string
	}{
		{
			name:      "a person's scale allows the ReplicaSet's replicas",
			parent:    grantedBy(t, person, base, scaled, 7),
			write:     controllerWrite(replicaSet(base), replicaSet(rsScaled)),
			justified: map[string]string{"spec.replicas": "scale"},
		},
		{
			name:       "a person's scale does not allow a change of the ReplicaSet's pod template",
			parent:     grantedBy(t, person, base, scaled, 7),
			write:      controllerWrite(replicaSet(base), replicaSet(rsTemplate)),
			violations: []string{"spec.template.spec.containers[0].image"},
			says: []string{"changes spec.template.spec.containers[0].image of ReplicaSet web-abc",
				"no unconsumed allowance on Deployment web allows it",
				"it needs an allowance {kind: ReplicaSet, mutation: spec.template.spec.containers[0].image} in kausal.io/allowances"},
		},
		{
			name:       "an autoscaler's /scale does not allow reverting a person's template edit of the ReplicaSet",
			parent:     grantedBy(t, Subject{User: hpa}, base, scaled, 7),
			write:      controllerWrite(replicaSet(rsTemplate), replicaSet(base)),
			violations: []string{"spec.template.spec.containers[0].image"},
		},
		{
			name:       "nor a scale and a template change in one write: the scale is allowed, the template is not",
			parent:     grantedBy(t, person, base, scaled, 7),
			write:      controllerWrite(replicaSet(base), replicaSet(workload{replicas: 3, images: []string{"evil:1"}})),
			justified:  map[string]string{"spec.replicas": "scale"},
			violations: []string{"spec.template.spec.containers[0].image"},
		},
		{
			name:      "an image rollout allows creating the new ReplicaSet",
			parent:    grantedBy(t, person, base, image, 7),
			write:     controllerWrite(nil, replicaSet(image)),
			justified: map[string]string{"create": "rollout"},
		},
		{
			name:       "a scale does not allow creating one",
			parent:     grantedBy(t, person, base, scaled, 7),
			write:      controllerWrite(nil, replicaSet(image)),
			violations: []string{"create"},
			says:       []string{"creates ReplicaSet web-abc", "{kind: ReplicaSet, mutation: create}"},
		},
		{
			name:       "nor deleting one",
			parent:     grantedBy(t, person, base, scaled, 7),
			write:      controllerWrite(replicaSet(base), nil),
			violations: []string{"delete"},
			says:       []string{"deletes ReplicaSet web-abc"},
		},
		{
			name:       "once the Deployment has settled at the scale's generation, the allowance is consumed",
			parent:     grantedBy(t, person, base, scaled, 8),
			write:      controllerWrite(replicaSet(base), replicaSet(rsScaled)),
			violations: []string{"spec.replicas"},
		},
		{
			name:      "settled at an older generation: not consumed",
			parent:    grantedBy(t, person, base, scaled, 7),
			write:     controllerWrite(replicaSet(base), replicaSet(rsScaled)),
			justified: map[string]string{"spec.replicas": "scale"},
		},
		{
			name:   "a writer the policy does not name may not use the allowance",
			parent: grantedBy(t, person, base, scaled, 7),
			write: Change{Subject: Subject{User: "system:serviceaccount:default:other"}, Kind: "ReplicaSet", Name: "web-abc",
				Old: replicaSet(base), New: replicaSet(rsScaled), Generation: 5},
			violations: []string{"spec.replicas"},
		},
		{
			name:       "a subject without mayInitiate changed the Deployment: nothing was granted, so the controller's writes are violations",
			parent:     grantedBy(t, intern, base, scaled, 7),
			write:      controllerWrite(replicaSet(base), replicaSet(rsScaled)),
			violations: []string{"spec.replicas"},
		},
		{
			name:   "a write of another child kind",
			parent: grantedBy(t, person, base, scaled, 7),
			write: Change{Subject: Subject{User: deployCtrl}, Kind: "Pod", Name: "web-abc-1",
				Old: replicaSet(base), New: replicaSet(rsScaled), Generation: 1},
			violations: []string{"spec.replicas"},
		},
		{
			name:   "a write that changes no desired state needs nothing",
			parent: Parent{Kind: "Deployment", Name: "web"},
			write:  controllerWrite(replicaSet(base), replicaSet(workload{replicas: 1, images: base.images, ann: map[string]any{"rev": "2"}})),
		},
		{
			name: "an allowance naming a policy that is gone, or invalid, allows nothing",
			parent: Parent{Kind: "Deployment", Name: "web", Allowances: []Allowance{
				{Kind: "ReplicaSet", Mutation: "spec", Generation: 8, Initiator: alice, Policy: "broken", Trace: []Hop{hop("Deployment", "web", 8, "spec.replicas")}},
				{Kind: "ReplicaSet", Mutation: "spec", Generation: 8, Initiator: alice, Policy: "gone", Trace: []Hop{hop("Deployment", "web", 8, "spec.replicas")}},
			}},
			write:      controllerWrite(replicaSet(base), replicaSet(rsScaled)),
			violations: []string{"spec.replicas"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Use(testPolicies(t), tt.parent, tt.write)
			got := map[string]string{}
			for _, j := range v.Justification {
				got[j.Mutation] = j.By.Policy
			}
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, tt.justified) {
				t.Errorf("justified = %v, want %v", got, tt.justified)
			}
			var viol []string
			for _, x := range v.Violations {
				viol = append(viol, x.Mutation)
				if x.NeededKind != tt.write.Kind || x.NeededMutation != x.Mutation {
					t.Errorf("violation %+v names the wrong allowance", x)
				}
			}
			if !reflect.DeepEqual(viol, tt.violations) {
				t.Errorf("violations = %v, want %v", viol, tt.violations)
			}
			if v.Allowed() != (len(tt.violations) == 0) {
				t.Errorf("Allowed() = %v", v.Allowed())
			}
			for _, s := range tt.says {
				found := false
				for _, x := range v.Violations {
					found = found || strings.Contains(x.Message, s)
				}
				if !found {
					t.Errorf("no violation message says %q: %+v", s, v.Violations)
				}
			}
		})
	}
}

func TestUseChoosesDeterministically(t *testing.T) {
	mk := func(policy, field string, gen int64) Allowance {
		return Allowance{Kind: "ReplicaSet", Mutation: "spec.replicas", Generation: gen, Initiator: alice, Policy: policy,
			Trace: []Hop{hop("Deployment", "web", gen, field)}}
	}
	// Both cover spec.replicas: by {kind}/{name}/{field}, the one from
	// spec.replicas comes before the one from spec.template, whatever the
	// generation and the order they are stored in.
	byScale := mk("scale", "spec.replicas", 9)
	byRollout := mk("rollout", "spec.template.spec.containers[0].image", 8)
	write := Change{Subject: Subject{User: deployCtrl}, Kind: "ReplicaSet", Name: "web-abc",
		Old: replicaSet(workload{replicas: 1}), New: replicaSet(workload{replicas: 2}), Generation: 3}
	for _, order := range [][]Allowance{{byScale, byRollout}, {byRollout, byScale}} {
		v := Use(testPolicies(t), Parent{Kind: "Deployment", Name: "web", Allowances: order}, write)
		if len(v.Justification) != 1 || !reflect.DeepEqual(v.Justification[0].By, byScale) {
			t.Errorf("stored as %v: chose %+v, want the scale's", []string{order[0].Policy, order[1].Policy}, v.Justification)
		}
	}
}

func TestPropagate(t *testing.T) {
	base := workload{replicas: 1, images: []string{"nginx:1"}}
	image := workload{replicas: 1, images: []string{"nginx:2"}}
	scaled := workload{replicas: 3, images: base.images}
	imageField := "spec.template.spec.containers[0].image"
	tests := []struct {
		name  string
		by    Parent
		write Change
		want  []Allowance
	}{
		{
			name: "the new ReplicaSet of a rollout may create and delete Pods; the trace goes on from the Deployment",
			by:   grantedBy(t, person, base, image, 7),
			write: Change{Subject: Subject{User: deployCtrl}, Kind: "ReplicaSet", Name: "web-new",
				New: replicaSet(workload{replicas: 1, images: image.images}), Generation: 1},
			want: []Allowance{
				{Kind: "Pod", Mutation: "create", Generation: 1, Initiator: alice, Policy: "replicaset-pods",
					Trace: []Hop{hop("Deployment", "web", 8, imageField), hop("ReplicaSet", "web-new", 1, "spec.replicas")}},
				{Kind: "Pod", Mutation: "delete", Generation: 1, Initiator: alice, Policy: "replicaset-pods",
					Trace: []Hop{hop("Deployment", "web", 8, imageField), hop("ReplicaSet", "web-new", 1, "spec.replicas")}},
			},
		},
		{
			name: "a scaled ReplicaSet likewise, at the generation the write produces",
			by:   grantedBy(t, person, base, scaled, 7),
			write: Change{Subject: Subject{User: deployCtrl}, Kind: "ReplicaSet", Name: "web-abc",
				Old: replicaSet(base), New: replicaSet(scaled), Generation: 4},
			want: []Allowance{
				{Kind: "Pod", Mutation: "create", Generation: 4, Initiator: alice, Policy: "replicaset-pods",
					Trace: []Hop{hop("Deployment", "web", 8, "spec.replicas"), hop("ReplicaSet", "web-abc", 4, "spec.replicas")}},
				{Kind: "Pod", Mutation: "delete", Generation: 4, Initiator: alice, Policy: "replicaset-pods",
					Trace: []Hop{hop("Deployment", "web", 8, "spec.replicas"), hop("ReplicaSet", "web-abc", 4, "spec.replicas")}},
			},
		},
		{
			name: "nothing is passed on for an unjustified change",
			by:   grantedBy(t, intern, base, scaled, 7),
			write: Change{Subject: Subject{User: deployCtrl}, Kind: "ReplicaSet", Name: "web-abc",
				Old: replicaSet(base), New: replicaSet(scaled), Generation: 4},
		},
		{
			name: "nor by a writer the child's policies do not name",
			by: Parent{Kind: "Deployment", Name: "web", Allowances: []Allowance{{Kind: "ReplicaSet", Mutation: "spec.replicas", Generation: 8,
				Initiator: alice, Policy: "scale-for-anyone", Trace: []Hop{hop("Deployment", "web", 8, "spec.replicas")}}}},
			write: Change{Subject: Subject{User: "system:serviceaccount:default:other", Groups: []string{"people"}}, Kind: "ReplicaSet", Name: "web-abc",
				Old: replicaSet(base), New: replicaSet(scaled), Generation: 4},
		},
		{
			name: "nor beyond the longest trace",
			by: Parent{Kind: "Deployment", Name: "web", Allowances: []Allowance{{Kind: "ReplicaSet", Mutation: "spec.replicas", Generation: 8,
				Initiator: alice, Policy: "scale", Trace: make([]Hop, MaxTraceHops)}}},
			write: Change{Subject: Subject{User: deployCtrl}, Kind: "ReplicaSet", Name: "web-abc",
				Old: replicaSet(base), New: replicaSet(scaled), Generation: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policies := append(testPolicies(t), compileYAML(t, policyYAML("scale-for-anyone", `  match:
    kind: Deployment
    fields: ["spec.replicas"]
  subjects:
  - {kind: Group, name: people}
  allow:
  - {kind: ReplicaSet, mutations: ["spec.replicas"]}
`)))
			v := Use(policies, tt.by, tt.write)
			g := Propagate(context.Background(), policies, v, tt.write)
			if !reflect.DeepEqual(g.Allowances, tt.want) {
				t.Errorf("allowances:\n got  %+v\n want %+v", g.Allowances, tt.want)
			}
		})
	}
}

func TestConsumedAndPrune(t *testing.T) {
	g7 := allowanceFor("ReplicaSet", "spec.replicas", 7, "spec.replicas")
	g8 := allowanceFor("ReplicaSet", "create", 8, "spec.template")
	s := Set{Allowances: []Allowance{g7, g8}, Unknown: nil}
	tests := []struct {
		settled      int64
		kept, pruned []Allowance
	}{
		{0, []Allowance{g7, g8}, nil},
		{6, []Allowance{g7, g8}, nil},
		{7, []Allowance{g8}, []Allowance{g7}},
		{9, nil, []Allowance{g7, g8}},
	}
	for _, tt := range tests {
		kept, pruned := Prune(s, tt.settled)
		if !reflect.DeepEqual(kept.Allowances, tt.kept) || !reflect.DeepEqual(pruned, tt.pruned) {
			t.Errorf("settled at %d: kept %+v, pruned %+v", tt.settled, kept.Allowances, pruned)
		}
	}
	withUnknown, err := Parse(`[1]`)
	if err != nil {
		t.Fatal(err)
	}
	if kept, _ := Prune(withUnknown, 100); len(kept.Unknown) != 1 {
		t.Errorf("an unknown entry was pruned")
	}
}

func TestStanding(t *testing.T) {
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "web-abc-x"},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c0", "image": "nginx:1"}}}}
	changedPod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "web-abc-x"},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c0", "image": "evil:1"}}}}
	duty := Duty{Kind: "ReplicaSet", Name: "web-abc", Generation: 4, Initiator: alice}
	tests := []struct {
		name       string
		write      Change
		violations []string
	}{
		{"the replicaset controller re-creates a Pod of a settled ReplicaSet",
			Change{Subject: Subject{User: rsCtrl}, Kind: "Pod", Name: "web-abc-x", New: pod, Generation: 1}, nil},
		{"and deletes one",
			Change{Subject: Subject{User: rsCtrl}, Kind: "Pod", Name: "web-abc-x", Old: pod}, nil},
		{"but changes none",
			Change{Subject: Subject{User: rsCtrl}, Kind: "Pod", Name: "web-abc-x", Old: pod, New: changedPod}, []string{"spec.containers[0].image"}},
		{"and nobody the policies do not name re-creates one",
			Change{Subject: Subject{User: "system:serviceaccount:default:other"}, Kind: "Pod", Name: "web-abc-x", New: pod}, []string{"create"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Standing(testPolicies(t), duty, tt.write)
			var viol []string
			for _, x := range v.Violations {
				viol = append(viol, x.Mutation)
			}
			if !reflect.DeepEqual(viol, tt.violations) {
				t.Fatalf("violations = %v, want %v", viol, tt.violations)
			}
			for _, j := range v.Justification {
				want := Allowance{Kind: "Pod", Mutation: j.Mutation, Generation: 4, Initiator: alice, Policy: "replicaset-pods",
					Trace: []Hop{hop("ReplicaSet", "web-abc", 4, "spec.replicas")}}
				if !reflect.DeepEqual(j.By, want) {
					t.Errorf("justified by %+v, want %+v", j.By, want)
				}
			}
		})
	}
}
