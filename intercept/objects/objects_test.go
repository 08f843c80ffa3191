package objects

import (
	"context"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

var (
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	widgets     = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

func obj(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// newStore serves Deployments (namespaced) and Widgets (cluster-scoped)
// from client-go fakes, and counts live GETs.
func newStore(t *testing.T, objects ...runtime.Object) (*Store, *int) {
	t.Helper()
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		deployments: "DeploymentList", widgets: "WidgetList",
	}, objects...)
	gets := 0
	dyn.PrependReactor("get", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	disc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: []string{"get", "list", "watch"}}}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: false, Verbs: []string{"get", "list", "watch"}}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return New(ctx, disc, dyn), &gets
}

func TestStoreReadsLiveUntilSyncedThenFromCache(t *testing.T) {
	s, gets := newStore(t, obj("apps/v1", "Deployment", "prod", "web"))
	ctx := context.Background()

	// The first read starts the informer and does not wait for it.
	u, src, err := s.Get(ctx, deployments, "prod", "web")
	if err != nil || u.GetName() != "web" {
		t.Fatalf("get: %v %v", u, err)
	}
	if src == FromLive && *gets != 1 {
		t.Fatalf("live read made %d GETs", *gets)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitForSync(waitCtx, deployments); err != nil {
		t.Fatal(err)
	}
	before := *gets
	u, src, err = s.Get(ctx, deployments, "prod", "web")
	if err != nil || src != FromCache || *gets != before {
		t.Fatalf("after sync: source %s, %d new GETs, err %v", src, *gets-before, err)
	}
	// Get copies: changing the result does not change the cache.
	u.SetLabels(map[string]string{"changed": "yes"})
	again, _, _ := s.Get(ctx, deployments, "prod", "web")
	if again.GetLabels()["changed"] == "yes" {
		t.Fatal("Get returned the informer's own object")
	}
	// GetShared does not copy: the same object twice.
	a, srcA, _ := s.GetShared(ctx, deployments, "prod", "web")
	b, _, _ := s.GetShared(ctx, deployments, "prod", "web")
	if srcA != FromCache || a != b {
		t.Fatal("GetShared copied a cached object")
	}

	// A miss in a synced cache falls back to a live GET (maybe just created).
	before = *gets
	if _, src, err := s.Get(ctx, deployments, "prod", "missing"); !apierrors.IsNotFound(err) || src != FromLive || *gets != before+1 {
		t.Fatalf("missing object: source %s, err %v, GETs %d", src, err, *gets-before)
	}
}

func TestStoreMapsKindsThroughDiscovery(t *testing.T) {
	s, _ := newStore(t, obj("example.com/v1", "Widget", "", "w"), obj("apps/v1", "Deployment", "prod", "web"))
	ctx := context.Background()

	// A cluster-scoped kind ignores the namespace it is asked in (a
	// namespaced child owned by a cluster-scoped parent).
	u, _, err := s.GetKindShared(ctx, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, "prod", "w")
	if err != nil || u.GetName() != "w" {
		t.Fatalf("cluster-scoped parent: %v %v", u, err)
	}
	if _, _, err := s.GetKindShared(ctx, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	gvk, err := s.KindFor(deployments)
	if err != nil || gvk.Kind != "Deployment" {
		t.Fatalf("KindFor: %v %v", gvk, err)
	}
	if _, err := s.Mapping(schema.GroupVersionKind{Group: "ghosts.example.com", Version: "v1", Kind: "Ghost"}); err == nil {
		t.Fatal("an unserved kind mapped")
	}
	// An ownerReference written at a version no longer served names the
	// same object at the version the group serves.
	u, _, err = s.GetKindShared(ctx, schema.GroupVersionKind{Group: "apps", Version: "v1beta2", Kind: "Deployment"}, "prod", "web")
	if err != nil || u.GetName() != "web" {
		t.Fatalf("parent at an unserved version: %v %v", u, err)
	}
	if _, _, err := s.GetKindShared(ctx, schema.GroupVersionKind{Group: "ghosts.example.com", Version: "v1", Kind: "Ghost"}, "prod", "g"); err == nil {
		t.Fatal("an unserved kind was read")
	}
}
