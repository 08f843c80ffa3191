package config

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper counts the lookups of kinds.
type countingMapper struct {
	meta.RESTMapper
	lookups int
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.lookups++
	return m.RESTMapper.RESTMapping(gk, versions...)
}

func TestKindCheckerWarnsOncePerFileAndSeesAKindInstalledLater(t *testing.T) {
	served := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}, {Group: "backup.example.com", Version: "v1"}})
	served.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	mapper := &countingMapper{RESTMapper: served}
	parse := func(yaml string) *Config {
		cfg, err := Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\n" + yaml))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := parse("ungatedChildKinds:\n- kind: secret\n- apiGroup: backup.example.com\n  kind: BackupAttempt\n")
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	core, logs := observer.New(zap.InfoLevel)
	counted := -1
	c := &KindChecker{Settings: func() *Config { return cfg }, Mapper: func() meta.RESTMapper { return mapper },
		Now: func() time.Time { return now }, Log: zap.New(core), Count: func(n int) { counted = n }}

	c.Check()
	if got := counted; got != 2 {
		t.Fatalf("counted %v, want 2 unserved kinds", got)
	}
	warned := logs.FilterMessage("the config file names a kind kube-apiserver does not serve").All()
	if len(warned) != 2 || warned[0].ContextMap()["problem"] != `line 4: ungatedChildKinds[0].kind: kube-apiserver serves no kind "secret" of the core group; kinds are case-sensitive: did you mean "Secret"?` {
		t.Fatalf("warnings %v", warned)
	}

	lookups := mapper.lookups
	now = now.Add(RecheckUnserved / 2)
	c.Check()
	if mapper.lookups != lookups || logs.Len() != 2 {
		t.Errorf("looked up again (%d lookups, %d log lines) before %s passed", mapper.lookups-lookups, logs.Len(), RecheckUnserved)
	}

	// The CustomResourceDefinition is installed.
	served.Add(schema.GroupVersionKind{Group: "backup.example.com", Version: "v1", Kind: "BackupAttempt"}, meta.RESTScopeNamespace)
	now = now.Add(RecheckUnserved)
	c.Check()
	if got := counted; got != 1 {
		t.Errorf("counted %v once BackupAttempt is served, want 1", got)
	}
	if n := len(logs.FilterMessage("the config file names a kind kube-apiserver does not serve").All()); n != 2 {
		t.Errorf("%d warnings after a recheck of the same file, want the 2 of the first check only", n)
	}
	if logs.FilterMessage("kinds the config file names are served now").Len() != 1 {
		t.Errorf("no word that a kind is served now: %v", logs.All())
	}

	// A new file is looked at at once, and every problem named again.
	cfg = parse("ungatedChildKinds:\n- kind: Secret\n")
	c.Check()
	if got := counted; got != 0 {
		t.Errorf("counted %v for a file whose kinds are all served, want 0", got)
	}
	lookups = mapper.lookups
	now = now.Add(2 * RecheckUnserved)
	c.Check()
	if mapper.lookups != lookups {
		t.Error("a file whose kinds are all served is looked up again")
	}
}

// A recheck reads discovery afresh: the mapper caches what it read, and a
// CustomResourceDefinition installed after the first check is otherwise
// never seen. Kinds of a group whose discovery failed are not known to be
// unserved: they are not counted, and looked up again.
func TestKindCheckerRefreshesDiscoveryAndLeavesFailedGroupsOut(t *testing.T) {
	served := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}, {Group: "backup.example.com", Version: "v1"}})
	served.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	cfg, err := Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\n" +
		"ungatedChildKinds:\n- apiGroup: backup.example.com\n  kind: BackupAttempt\n" +
		"unboundStatusRecordDelays:\n- apiGroup: metrics.k8s.io\n  kind: PodMetrics\n  delay: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	refreshes := 0
	undiscovered := map[string]bool{"metrics.k8s.io": true}
	counted := -1
	core, logs := observer.New(zap.InfoLevel)
	c := &KindChecker{Settings: func() *Config { return cfg }, Mapper: func() meta.RESTMapper { return served },
		Refresh: func() { refreshes++ }, Undiscovered: func() (map[string]bool, error) { return undiscovered, nil },
		Now: func() time.Time { return now }, Log: zap.New(core), Count: func(n int) { counted = n }}

	c.Check()
	if got := counted; got != 1 {
		t.Fatalf("counted %v, want 1: BackupAttempt, and not PodMetrics, whose group's discovery failed", got)
	}
	if logs.Len() != 1 {
		t.Errorf("log %v, want one warning, for BackupAttempt", logs.All())
	}
	before := refreshes
	now = now.Add(RecheckUnserved)
	c.Check()
	if refreshes != before+1 {
		t.Errorf("%d refreshes of discovery for a recheck, want 1", refreshes-before)
	}

	// Both are served now; a failed group alone keeps the checks going.
	served.Add(schema.GroupVersionKind{Group: "backup.example.com", Version: "v1", Kind: "BackupAttempt"}, meta.RESTScopeNamespace)
	now = now.Add(RecheckUnserved)
	c.Check()
	if got := counted; got != 0 {
		t.Errorf("counted %v once BackupAttempt is served, want 0", got)
	}
	before = refreshes
	now = now.Add(RecheckUnserved)
	c.Check()
	if refreshes != before+1 {
		t.Error("a kind of a group whose discovery failed is not looked up again")
	}
	undiscovered = nil
	now = now.Add(RecheckUnserved)
	c.Check()
	if got := counted; got != 1 {
		t.Errorf("counted %v once metrics.k8s.io answers and PodMetrics is not among its kinds, want 1", got)
	}
}

// A kind served when the file was checked may stop being served later (its
// CustomResourceDefinition removed): a file whose kinds are all served is
// looked up again every RecheckServed, and a kind found unserved then is
// warned about once and counted.
func TestKindCheckerSeesAKindThatStopsBeingServed(t *testing.T) {
	withCRD := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}, {Group: "backup.example.com", Version: "v1"}})
	withCRD.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	withCRD.Add(schema.GroupVersionKind{Group: "backup.example.com", Version: "v1", Kind: "BackupAttempt"}, meta.RESTScopeNamespace)
	withoutCRD := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}})
	withoutCRD.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	mapper := &countingMapper{RESTMapper: withCRD}
	cfg, err := Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\n" +
		"ungatedChildKinds:\n- kind: Secret\n- apiGroup: backup.example.com\n  kind: BackupAttempt\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	refreshes, counted := 0, -1
	core, logs := observer.New(zap.InfoLevel)
	c := &KindChecker{Settings: func() *Config { return cfg }, Mapper: func() meta.RESTMapper { return mapper },
		Refresh: func() { refreshes++ }, Now: func() time.Time { return now }, Log: zap.New(core), Count: func(n int) { counted = n }}
	warnings := func() int {
		return logs.FilterMessage("the config file names a kind kube-apiserver does not serve").Len()
	}

	c.Check()
	if counted != 0 || warnings() != 0 {
		t.Fatalf("counted %d, %d warnings, for a file whose kinds are served", counted, warnings())
	}
	mapper.RESTMapper = withoutCRD
	lookups := mapper.lookups
	now = now.Add(RecheckServed - time.Second)
	c.Check()
	if mapper.lookups != lookups {
		t.Errorf("a file whose kinds were served looked up again before %s", RecheckServed)
	}
	now = now.Add(time.Second)
	c.Check()
	if counted != 1 || warnings() != 1 || refreshes != 2 {
		t.Fatalf("after %s: counted %d, %d warnings, %d refreshes of discovery; want BackupAttempt counted and warned about, on discovery read afresh", RecheckServed, counted, warnings(), refreshes)
	}
	now = now.Add(RecheckUnserved)
	c.Check()
	if counted != 1 || warnings() != 1 {
		t.Errorf("a recheck counted %d with %d warnings, want the kind counted and not warned about twice", counted, warnings())
	}
	mapper.RESTMapper = withCRD
	now = now.Add(RecheckUnserved)
	c.Check()
	if counted != 0 || logs.FilterMessage("kinds the config file names are served now").Len() != 1 {
		t.Errorf("counted %d once the CRD is back, log %v", counted, logs.All())
	}
}
