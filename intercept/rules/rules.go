// Package rules decides which writes the proxy intercepts: resource rules
// (API groups and resources, included or excluded, with wildcards) and
// excluded namespaces.
package rules

import (
	"fmt"
	"slices"
	"strings"
)

// Wildcard matches every API group or resource.
const Wildcard = "*"

// Rule selects resources. The core group is "". Resources are plural
// resource names ("deployments"); a subresource is never named here: which
// subresource writes count is decided by the write classification.
type Rule struct {
	APIGroups []string `json:"apiGroups" yaml:"apiGroups"`
	Resources []string `json:"resources" yaml:"resources"`
}

// Matches reports whether the rule selects group/resource.
func (r Rule) Matches(group, resource string) bool {
	return matchAny(r.APIGroups, group) && matchAny(r.Resources, resource)
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if p == Wildcard || p == s {
			return true
		}
	}
	return false
}

// Validate reports rules that can never match.
func (r Rule) Validate() error {
	if len(r.APIGroups) == 0 {
		return fmt.Errorf("apiGroups must not be empty (use \"\" for the core group, %q for all)", Wildcard)
	}
	if len(r.Resources) == 0 {
		return fmt.Errorf("resources must not be empty (use %q for all)", Wildcard)
	}
	for _, res := range r.Resources {
		if strings.Contains(res, "/") {
			return fmt.Errorf("resource %q: subresources are not selected by rules", res)
		}
	}
	return nil
}

// Rules is the whole targeting configuration. A write is intercepted when
// an Include rule matches, no Exclude rule matches and its namespace is not
// excluded. Cluster-scoped resources have no namespace and are never
// excluded by namespace.
type Rules struct {
	Include            []Rule   `json:"include"`
	Exclude            []Rule   `json:"exclude"`
	ExcludedNamespaces []string `json:"excludedNamespaces"`
}

// DefaultExcludedNamespaces are the system namespaces left alone by default.
var DefaultExcludedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// DefaultExclude are resources that are never worth intercepting: reviews
// and other requests that are not persisted, and high-churn kinds whose
// writes are bookkeeping, not desired state.
var DefaultExclude = []Rule{
	{APIGroups: []string{"authentication.k8s.io", "authorization.k8s.io"}, Resources: []string{Wildcard}},
	{APIGroups: []string{""}, Resources: []string{"events", "endpoints", "bindings", "componentstatuses"}},
	{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases", "leasecandidates"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}},
}

// Default is what the proxy intercepts without a config file: every
// resource of every group, custom resources included, minus DefaultExclude
// and the DefaultExcludedNamespaces.
func Default() Rules {
	return Rules{
		Include:            []Rule{{APIGroups: []string{Wildcard}, Resources: []string{Wildcard}}},
		Exclude:            slices.Clone(DefaultExclude),
		ExcludedNamespaces: slices.Clone(DefaultExcludedNamespaces),
	}
}

// Targets reports whether a write to group/resource in namespace is
// intercepted.
func (r Rules) Targets(group, resource, namespace string) bool {
	if namespace != "" && slices.Contains(r.ExcludedNamespaces, namespace) {
		return false
	}
	for _, ex := range r.Exclude {
		if ex.Matches(group, resource) {
			return false
		}
	}
	for _, in := range r.Include {
		if in.Matches(group, resource) {
			return true
		}
	}
	return false
}

// Validate checks every rule and names the offending one.
func (r Rules) Validate() error {
	for i, in := range r.Include {
		if err := in.Validate(); err != nil {
			return fmt.Errorf("include[%d]: %w", i, err)
		}
	}
	for i, ex := range r.Exclude {
		if err := ex.Validate(); err != nil {
			return fmt.Errorf("exclude[%d]: %w", i, err)
		}
	}
	for i, ns := range r.ExcludedNamespaces {
		if ns == "" {
			return fmt.Errorf("excludedNamespaces[%d]: empty namespace name", i)
		}
	}
	return nil
}
