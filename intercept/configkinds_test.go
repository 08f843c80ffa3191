package intercept

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/config"
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
	parse := func(yaml string) *config.Config {
		cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\n" + yaml))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := parse("ungatedChildKinds:\n- kind: secret\n- apiGroup: backup.example.com\n  kind: BackupAttempt\n")
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	core, logs := observer.New(zap.InfoLevel)
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	c := &kindChecker{settings: func() *config.Config { return cfg }, mapper: func() meta.RESTMapper { return mapper },
		now: func() time.Time { return now }, log: zap.New(core), gauge: gauge}

	c.check()
	if got := testutil.ToFloat64(gauge); got != 2 {
		t.Fatalf("gauge %v, want 2 unserved kinds", got)
	}
	warned := logs.FilterMessage("the config file names a kind kube-apiserver does not serve").All()
	if len(warned) != 2 || warned[0].ContextMap()["problem"] != `line 4: ungatedChildKinds[0].kind: kube-apiserver serves no kind "secret" of the core group; kinds are case-sensitive: did you mean "Secret"?` {
		t.Fatalf("warnings %v", warned)
	}

	lookups := mapper.lookups
	now = now.Add(recheckUnserved / 2)
	c.check()
	if mapper.lookups != lookups || logs.Len() != 2 {
		t.Errorf("looked up again (%d lookups, %d log lines) before %s passed", mapper.lookups-lookups, logs.Len(), recheckUnserved)
	}

	// The CustomResourceDefinition is installed.
	served.Add(schema.GroupVersionKind{Group: "backup.example.com", Version: "v1", Kind: "BackupAttempt"}, meta.RESTScopeNamespace)
	now = now.Add(recheckUnserved)
	c.check()
	if got := testutil.ToFloat64(gauge); got != 1 {
		t.Errorf("gauge %v once BackupAttempt is served, want 1", got)
	}
	if n := len(logs.FilterMessage("the config file names a kind kube-apiserver does not serve").All()); n != 2 {
		t.Errorf("%d warnings after a recheck of the same file, want the 2 of the first check only", n)
	}
	if logs.FilterMessage("kinds the config file names are served now").Len() != 1 {
		t.Errorf("no word that a kind is served now: %v", logs.All())
	}

	// A new file is looked at at once, and every problem named again.
	cfg = parse("ungatedChildKinds:\n- kind: Secret\n")
	c.check()
	if got := testutil.ToFloat64(gauge); got != 0 {
		t.Errorf("gauge %v for a file whose kinds are all served, want 0", got)
	}
	lookups = mapper.lookups
	now = now.Add(2 * recheckUnserved)
	c.check()
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
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\n" +
		"ungatedChildKinds:\n- apiGroup: backup.example.com\n  kind: BackupAttempt\n" +
		"unboundStatusRecordDelays:\n- apiGroup: metrics.k8s.io\n  kind: PodMetrics\n  delay: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	refreshes := 0
	undiscovered := map[string]bool{"metrics.k8s.io": true}
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	core, logs := observer.New(zap.InfoLevel)
	c := &kindChecker{settings: func() *config.Config { return cfg }, mapper: func() meta.RESTMapper { return served },
		refresh: func() { refreshes++ }, undiscovered: func() (map[string]bool, error) { return undiscovered, nil },
		now: func() time.Time { return now }, log: zap.New(core), gauge: gauge}

	c.check()
	if got := testutil.ToFloat64(gauge); got != 1 {
		t.Fatalf("gauge %v, want 1: BackupAttempt, and not PodMetrics, whose group's discovery failed", got)
	}
	if logs.Len() != 1 {
		t.Errorf("log %v, want one warning, for BackupAttempt", logs.All())
	}
	before := refreshes
	now = now.Add(recheckUnserved)
	c.check()
	if refreshes != before+1 {
		t.Errorf("%d refreshes of discovery for a recheck, want 1", refreshes-before)
	}

	// Both are served now; a failed group alone keeps the checks going.
	served.Add(schema.GroupVersionKind{Group: "backup.example.com", Version: "v1", Kind: "BackupAttempt"}, meta.RESTScopeNamespace)
	now = now.Add(recheckUnserved)
	c.check()
	if got := testutil.ToFloat64(gauge); got != 0 {
		t.Errorf("gauge %v once BackupAttempt is served, want 0", got)
	}
	before = refreshes
	now = now.Add(recheckUnserved)
	c.check()
	if refreshes != before+1 {
		t.Error("a kind of a group whose discovery failed is not looked up again")
	}
	undiscovered = nil
	now = now.Add(recheckUnserved)
	c.check()
	if got := testutil.ToFloat64(gauge); got != 1 {
		t.Errorf("gauge %v once metrics.k8s.io answers and PodMetrics is not among its kinds, want 1", got)
	}
}
