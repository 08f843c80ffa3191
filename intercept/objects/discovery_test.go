package objects

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// downDiscovery answers 503 for the group versions in down, as an
// aggregated API server whose backend does not answer does.
type downDiscovery struct {
	*fakediscovery.FakeDiscovery
	down map[string]bool
}

func (d *downDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if d.down[gv] {
		return nil, apierrors.NewGenericServerResponse(http.StatusServiceUnavailable, "get", schema.GroupResource{}, "", "the server is currently unable to handle the request", 0, true)
	}
	return d.FakeDiscovery.ServerResourcesForGroupVersion(gv)
}

func discoveryStore(t *testing.T, disc *downDiscovery) *Store {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return New(ctx, disc, nil, nil)
}

func TestUndiscoveredGroups(t *testing.T) {
	disc := &downDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}, down: map[string]bool{"metrics.k8s.io/v1beta1": true}}
	disc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "secrets", SingularName: "secret", Namespaced: true, Kind: "Secret"}}},
		{GroupVersion: "metrics.k8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Kind: "PodMetrics"}}},
	}
	s := discoveryStore(t, disc)
	groups, err := s.UndiscoveredGroups()
	if err != nil || len(groups) != 1 || !groups["metrics.k8s.io"] {
		t.Fatalf("undiscovered groups %v (error %v), want metrics.k8s.io", groups, err)
	}
	disc.down = nil
	s.now = func() time.Time { return time.Now().Add(time.Hour) }
	s.RefreshDiscovery()
	if groups, err := s.UndiscoveredGroups(); err != nil || len(groups) != 0 {
		t.Errorf("undiscovered groups %v (error %v) once every group answers, want none", groups, err)
	}
}

// The mapper caches what discovery said; a lookup that misses does not
// read it again while it is fresh. RefreshDiscovery does, at most once
// per discoveryResetInterval.
func TestRefreshDiscoverySeesAKindServedLater(t *testing.T) {
	disc := &downDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}}
	disc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "secrets", SingularName: "secret", Namespaced: true, Kind: "Secret"}}},
	}
	s := discoveryStore(t, disc)
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	backup := schema.GroupKind{Group: "backup.example.com", Kind: "BackupAttempt"}
	if _, err := s.RESTMapper().RESTMapping(backup); !meta.IsNoMatchError(err) {
		t.Fatalf("BackupAttempt before its CRD: %v, want no match", err)
	}
	s.RefreshDiscovery()
	if _, err := s.RESTMapper().RESTMapping(backup); !meta.IsNoMatchError(err) {
		t.Fatalf("BackupAttempt after a refresh before its CRD: %v, want no match", err)
	}
	disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: "backup.example.com/v1",
		APIResources: []metav1.APIResource{{Name: "backupattempts", SingularName: "backupattempt", Namespaced: true, Kind: "BackupAttempt"}}})
	now = now.Add(discoveryResetInterval / 2)
	s.RefreshDiscovery()
	if _, err := s.RESTMapper().RESTMapping(backup); !meta.IsNoMatchError(err) {
		t.Errorf("discovery read again %s after the last refresh: %v", discoveryResetInterval/2, err)
	}
	now = now.Add(discoveryResetInterval)
	s.RefreshDiscovery()
	if _, err := s.RESTMapper().RESTMapping(backup); err != nil {
		t.Errorf("BackupAttempt after a refresh once its CRD is installed: %v", err)
	}
}
