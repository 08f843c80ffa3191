package rules

import "testing"

func TestDefaultTargets(t *testing.T) {
	d := Default()
	cases := []struct {
		group, resource, namespace string
		want                       bool
	}{
		{"apps", "deployments", "prod", true},
		{"apps", "replicasets", "prod", true},
		{"", "pods", "prod", true},
		{"", "configmaps", "prod", true},
		{"", "secrets", "prod", true},
		{"rbac.authorization.k8s.io", "clusterroles", "", true},
		{"example.com", "widgets", "prod", true},
		{"example.com", "clusterwidgets", "", true},
		{"", "namespaces", "", true},
		{"apps", "deployments", "kube-system", false},
		{"", "configmaps", "kube-public", false},
		{"coordination.k8s.io", "leases", "kube-node-lease", false},
		{"coordination.k8s.io", "leases", "prod", false},
		{"", "events", "prod", false},
		{"events.k8s.io", "events", "prod", false},
		{"", "endpoints", "prod", false},
		{"discovery.k8s.io", "endpointslices", "prod", false},
		{"authentication.k8s.io", "tokenreviews", "", false},
		{"authorization.k8s.io", "subjectaccessreviews", "", false},
		{"authorization.k8s.io", "localsubjectaccessreviews", "prod", false},
		{"", "bindings", "prod", false},
	}
	for _, tc := range cases {
		if got := d.Targets(tc.group, tc.resource, tc.namespace); got != tc.want {
			t.Errorf("Targets(%q, %q, %q) = %v, want %v", tc.group, tc.resource, tc.namespace, got, tc.want)
		}
	}
}

func TestCustomRules(t *testing.T) {
	r := Rules{
		Include:            []Rule{{APIGroups: []string{"apps"}, Resources: []string{Wildcard}}, {APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}},
		Exclude:            []Rule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}}},
		ExcludedNamespaces: []string{"sandbox"},
	}
	cases := []struct {
		group, resource, namespace string
		want                       bool
	}{
		{"apps", "deployments", "prod", true},
		{"apps", "daemonsets", "prod", false},
		{"apps", "deployments", "sandbox", false},
		{"apps", "deployments", "kube-system", true}, // only the configured namespaces are excluded
		{"example.com", "widgets", "prod", true},
		{"example.com", "gadgets", "prod", false},
		{"", "configmaps", "prod", false},
	}
	for _, tc := range cases {
		if got := r.Targets(tc.group, tc.resource, tc.namespace); got != tc.want {
			t.Errorf("Targets(%q, %q, %q) = %v, want %v", tc.group, tc.resource, tc.namespace, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name    string
		rules   Rules
		wantErr string
	}{
		{"default", Default(), ""},
		{"empty groups", Rules{Include: []Rule{{Resources: []string{"*"}}}}, `include[0]: apiGroups must not be empty (use "" for the core group, "*" for all)`},
		{"empty resources", Rules{Exclude: []Rule{{APIGroups: []string{""}}}}, `exclude[0]: resources must not be empty (use "*" for all)`},
		{"subresource", Rules{Include: []Rule{{APIGroups: []string{"apps"}, Resources: []string{"deployments/scale"}}}}, `include[0]: resource "deployments/scale": subresources are not selected by rules`},
		{"empty namespace", Rules{ExcludedNamespaces: []string{""}}, "excludedNamespaces[0]: empty namespace name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rules.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
