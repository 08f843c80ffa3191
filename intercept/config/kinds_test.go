package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/restmapper"
)

func TestParseNamesTheKindsOfTheFile(t *testing.T) {
	cfg, err := Parse([]byte(`apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
lifecycle:
- apiGroup: apps
  kind: ReplicaSet
  order: [ObservedGenerationCurrent]
ungatedChildKinds:
- kind: Pod
- kind: Secret
  parent:
    apiGroup: cert-manager.io
    kind: Certificate
unboundStatusRecordDelays:
- apiGroup: cache.example.com
  kind: Memcached
  delay: 1m
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []NamedKind{
		{Path: "lifecycle[0].kind", Line: 5, Kind: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}},
		{Path: "ungatedChildKinds[0].kind", Line: 8, Kind: schema.GroupKind{Kind: "Pod"}},
		{Path: "ungatedChildKinds[1].kind", Line: 9, Kind: schema.GroupKind{Kind: "Secret"}},
		{Path: "ungatedChildKinds[1].parent.kind", Line: 12, Kind: schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}},
		{Path: "unboundStatusRecordDelays[0].kind", Line: 15, Kind: schema.GroupKind{Group: "cache.example.com", Kind: "Memcached"}},
	}
	if !slices.Equal(cfg.NamedKinds, want) {
		t.Errorf("named kinds\n%v\nwant\n%v", cfg.NamedKinds, want)
	}
	if len(Default().NamedKinds) != 0 {
		t.Error("the defaults name kinds to check; a cluster without cert-manager would be warned about them")
	}
}

// brokenDiscovery is a RESTMapper whose discovery fails.
type brokenDiscovery struct{ meta.RESTMapper }

func (brokenDiscovery) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, errors.New("the server is currently unable to handle the request")
}

func TestUnservedKinds(t *testing.T) {
	// The mapper discovery gives, as the proxy's store builds it.
	mapper := restmapper.NewDiscoveryRESTMapper([]*restmapper.APIGroupResources{
		{Group: metav1.APIGroup{Versions: []metav1.GroupVersionForDiscovery{{Version: "v1"}}, PreferredVersion: metav1.GroupVersionForDiscovery{Version: "v1"}},
			VersionedResources: map[string][]metav1.APIResource{"v1": {{Name: "secrets", SingularName: "secret", Namespaced: true, Kind: "Secret"}}}},
		{Group: metav1.APIGroup{Name: "apps", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "apps/v1", Version: "v1"}}, PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "apps/v1", Version: "v1"}},
			VersionedResources: map[string][]metav1.APIResource{"v1": {{Name: "replicasets", SingularName: "replicaset", Namespaced: true, Kind: "ReplicaSet"}}}},
	})
	named := func(group, kind string) NamedKind {
		return NamedKind{Path: "ungatedChildKinds[0].kind", Line: 7, Kind: schema.GroupKind{Group: group, Kind: kind}}
	}
	cases := []struct {
		name string
		kind NamedKind
		want string
	}{
		{"served", named("", "Secret"), ""},
		{"served in its group", named("apps", "ReplicaSet"), ""},
		{"in lower case, which discovery maps too", named("", "secret"), `line 7: ungatedChildKinds[0].kind: kube-apiserver serves no kind "secret" of the core group; kinds are case-sensitive: did you mean "Secret"?`},
		{"in another group", named("batch", "ReplicaSet"), `line 7: ungatedChildKinds[0].kind: kube-apiserver serves no kind "ReplicaSet" in group "batch"; the entry matches nothing until its kind is served`},
		{"not installed", named("cert-manager.io", "Certificate"), `kube-apiserver serves no kind "Certificate" in group "cert-manager.io"; the entry matches nothing until its kind is served (is its CustomResourceDefinition installed`},
		{"misspelt", named("", "Secrett"), `serves no kind "Secrett" of the core group; the entry matches nothing`},
		{"a kind of another group in lower case", named("", "replicaset"), `serves no kind "replicaset" of the core group; the entry matches nothing`},
		{"in another case", named("apps", "Replicaset"), `serves no kind "Replicaset" in group "apps"; kinds are case-sensitive: did you mean "ReplicaSet"?`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := UnservedKinds([]NamedKind{tc.kind}, mapper)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Errorf("problems %v, want none", problems)
			case tc.want != "" && (len(problems) != 1 || !strings.Contains(problems[0].String(), tc.want)):
				t.Errorf("problems %v, want one containing %q", problems, tc.want)
			}
		})
	}
	if _, err := UnservedKinds([]NamedKind{named("", "Secret")}, brokenDiscovery{mapper}); err == nil {
		t.Error("a discovery failure tells nothing about the kinds, and must be an error")
	}
}
