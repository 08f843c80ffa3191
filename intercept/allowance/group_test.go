package allowance

import (
	"context"
	"testing"
)

// groupPolicy is a Deployment → ReplicaSet scale policy whose parent and
// child groups are given as YAML ("" leaves the field out).
func groupPolicy(t *testing.T, parentGroup, childGroup string) *Compiled {
	t.Helper()
	match := "  match:\n    kind: Deployment\n    fields: [\"spec.replicas\"]\n"
	if parentGroup != "" {
		match += "    group: " + parentGroup + "\n"
	}
	allow := "  - {kind: ReplicaSet, mutations: [\"spec.replicas\"]"
	if childGroup != "" {
		allow += ", group: " + childGroup
	}
	allow += "}\n"
	return compileYAML(t, policyYAML("scale", match+`  subjects:
  - {kind: Group, name: people, mayInitiate: true}
  - {kind: ServiceAccount, namespace: kube-system, name: deployment-controller}
  allow:
`+allow))
}

// TestPolicyGroups: a policy that names the API group of its kinds speaks
// only of that group (a custom resource kind named Deployment in another
// group is not a Deployment); one that names none speaks of the kind in
// every group; an explicit "" is the core group.
func TestPolicyGroups(t *testing.T) {
	const other = "example.com"
	tests := []struct {
		name                     string
		policyParent, policyKid  string // YAML of the policy's groups; "" leaves them out
		parentGroup, childGroup  string // the groups of the objects written
		wantGoverns, wantInitiat bool
		wantUsed                 bool
	}{
		{name: "no group: apps", parentGroup: "apps", childGroup: "apps", wantGoverns: true, wantInitiat: true, wantUsed: true},
		{name: "no group: any group", parentGroup: other, childGroup: other, wantGoverns: true, wantInitiat: true, wantUsed: true},
		{name: "apps: apps", policyParent: "apps", policyKid: "apps", parentGroup: "apps", childGroup: "apps", wantGoverns: true, wantInitiat: true, wantUsed: true},
		{name: "apps: a Deployment of another group", policyParent: "apps", policyKid: "apps", parentGroup: other, childGroup: "apps"},
		{name: "apps: a ReplicaSet of another group", policyParent: "apps", policyKid: "apps", parentGroup: "apps", childGroup: other,
			wantGoverns: true, wantInitiat: true},
		{name: `"": the core group only`, policyParent: `""`, policyKid: `""`, parentGroup: "apps", childGroup: "apps"},
		{name: `"": the core group`, policyParent: `""`, policyKid: `""`, parentGroup: "", childGroup: "", wantGoverns: true, wantInitiat: true, wantUsed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := groupPolicy(t, tc.policyParent, tc.policyKid)
			if !p.Valid() {
				t.Fatalf("the policy does not compile: %v", p.Problems)
			}
			policies := []*Compiled{p}
			if got := p.Governs(tc.parentGroup, "Deployment"); got != tc.wantGoverns {
				t.Errorf("Governs(%q, Deployment) = %v, want %v", tc.parentGroup, got, tc.wantGoverns)
			}

			g := Initiate(context.Background(), policies, Change{Subject: person, Group: tc.parentGroup, Kind: "Deployment", Name: "web",
				Old: deployment(workload{replicas: 1}), New: deployment(workload{replicas: 3}), Generation: 2})
			if got := len(g.Allowances) > 0; got != tc.wantInitiat {
				t.Errorf("Initiate granted %v, want %v", g.Allowances, tc.wantInitiat)
			}

			// Use is given the allowance the policy would have granted,
			// so it tells the child's group apart on its own.
			granted := p.grant(2, alice, []Hop{hop("Deployment", "web", 2, "spec.replicas")})
			v := Use(policies, Parent{Group: tc.parentGroup, Kind: "Deployment", Name: "web", Allowances: granted},
				Change{Subject: Subject{User: deployCtrl}, Group: tc.childGroup, Kind: "ReplicaSet", Name: "web-abc",
					Old: replicaSet(workload{replicas: 1}), New: replicaSet(workload{replicas: 3}), Generation: 2})
			if v.Allowed() != tc.wantUsed {
				t.Errorf("Use allowed %v (violations %v), want %v", v.Allowed(), v.Violations, tc.wantUsed)
			}

			s := Standing(policies, Duty{Group: tc.parentGroup, Kind: "Deployment", Name: "web", Generation: 2},
				Change{Subject: Subject{User: deployCtrl}, Group: tc.childGroup, Kind: "ReplicaSet", Name: "web-abc",
					Old: replicaSet(workload{replicas: 1}), New: replicaSet(workload{replicas: 3}), Generation: 2})
			if s.Allowed() != tc.wantUsed {
				t.Errorf("Standing allowed %v (violations %v), want %v", s.Allowed(), s.Violations, tc.wantUsed)
			}
		})
	}
}
