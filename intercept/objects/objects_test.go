package objects

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
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
func newStore(t *testing.T, objects ...*unstructured.Unstructured) (*Store, *int) {
	t.Helper()
	scheme := runtime.NewScheme()
	var whole, metadata []runtime.Object
	metaScheme := metadatafake.NewTestScheme()
	metav1.AddMetaToScheme(metaScheme)
	for _, o := range objects {
		whole = append(whole, o)
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(o.GroupVersionKind())
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object["metadata"].(map[string]interface{}), &m.ObjectMeta); err != nil {
			t.Fatal(err)
		}
		metadata = append(metadata, m)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		deployments: "DeploymentList", widgets: "WidgetList",
	}, whole...)
	meta := metadatafake.NewSimpleMetadataClient(metaScheme, metadata...)
	gets := 0
	dyn.PrependReactor("get", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	disc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: []string{"get", "list", "watch"}}}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: false, Verbs: []string{"get", "list", "watch"}}}},
		{GroupVersion: "example.com/v1alpha1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: false, Verbs: []string{"get", "list", "watch"}}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return New(ctx, disc, dyn, meta), &gets
}

// web is a Deployment as kube-apiserver stores it: spec, status and
// managedFields besides the metadata decisions read.
func web() *unstructured.Unstructured {
	u := obj("apps/v1", "Deployment", "prod", "web")
	u.SetGeneration(3)
	u.SetResourceVersion("42")
	u.SetAnnotations(map[string]string{"kausality.io/mode": "enforce"})
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "w-uid", Controller: ptrTo(true)}})
	u.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:replicas":{}}}`)}},
		{Manager: "deployment-controller", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:observedGeneration":{},"f:readyReplicas":{},"f:conditions":{}}}`)}},
	})
	u.Object["spec"] = map[string]interface{}{"replicas": int64(3), "revisionHistoryLimit": int64(2)}
	u.Object["status"] = map[string]interface{}{"observedGeneration": int64(3), "readyReplicas": int64(3)}
	return u
}

func ptrTo[T any](v T) *T { return &v }

func TestStoreReadsLiveUntilSyncedThenFromCache(t *testing.T) {
	s, gets := newStore(t, web())
	ctx := context.Background()

	// The first read, before the resource is admitted, is live.
	u, src, err := s.GetShared(ctx, deployments, "prod", "web")
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
	u, src, err = s.GetWhole(ctx, deployments, "prod", "web")
	if err != nil || src != FromCache || *gets != before {
		t.Fatalf("after sync: source %s, %d new GETs, err %v", src, *gets-before, err)
	}
	// GetWhole copies: changing the result does not change the cache.
	u.SetLabels(map[string]string{"changed": "yes"})
	again, _, _ := s.GetWhole(ctx, deployments, "prod", "web")
	if again.GetLabels()["changed"] == "yes" {
		t.Fatal("GetWhole returned the informer's own object")
	}
	// GetShared does not copy: the same object twice.
	a, srcA, _ := s.GetShared(ctx, deployments, "prod", "web")
	b, _, _ := s.GetShared(ctx, deployments, "prod", "web")
	if srcA != FromCache || a != b {
		t.Fatal("GetShared copied a cached object")
	}

	// A miss in a synced cache falls back to a live GET (maybe just created).
	before = *gets
	if _, src, err := s.GetShared(ctx, deployments, "prod", "missing"); !apierrors.IsNotFound(err) || src != FromLive || *gets != before+1 {
		t.Fatalf("missing object: source %s, err %v, GETs %d", src, err, *gets-before)
	}
}

// A cached parent keeps what decisions read (annotations, spec, the status
// settledness reads, who owns status.observedGeneration) and loses the rest
// of its managedFields.
func TestParentsAreCachedWithoutManagedFields(t *testing.T) {
	s, _ := newStore(t, web())
	ctx := context.Background()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitForSync(waitCtx, deployments); err != nil {
		t.Fatal(err)
	}
	u, src, err := s.GetShared(ctx, deployments, "prod", "web")
	if err != nil || src != FromCache {
		t.Fatalf("source %s, err %v", src, err)
	}
	if mf := u.GetManagedFields(); len(mf) != 1 || mf[0].Manager != "deployment-controller" || mf[0].Subresource != "status" ||
		string(mf[0].FieldsV1.Raw) != `{"f:status":{"f:observedGeneration":{}}}` {
		t.Errorf("managedFields cached: %v", mf)
	}
	if managers, err := controllerid.ObservedGenerationManagers(u); err != nil || len(managers) != 1 || managers[0] != "deployment-controller" {
		t.Errorf("the controller is no longer found in the cached parent: %v, %v", managers, err)
	}
	if limit, _, _ := unstructured.NestedInt64(u.Object, "spec", "revisionHistoryLimit"); limit != 2 {
		t.Errorf("spec.revisionHistoryLimit = %d, want 2", limit)
	}
	if g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); g != 3 {
		t.Errorf("status.observedGeneration = %d, want 3", g)
	}
	if u.GetAnnotations()["kausality.io/mode"] != "enforce" {
		t.Errorf("annotations lost: %v", u.GetAnnotations())
	}
}

// A cached child is its metadata: no spec, no status, no managedFields;
// what a decision reads of it (ownerReferences, annotations,
// resourceVersion, generation) is there.
func TestChildrenAreCachedAsMetadataOnly(t *testing.T) {
	s, gets := newStore(t, web())
	ctx := context.Background()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitForMetadataSync(waitCtx, deployments); err != nil {
		t.Fatal(err)
	}
	before := *gets
	u, src, err := s.GetMetadata(ctx, deployments, "prod", "web")
	if err != nil || src != FromCache || *gets != before {
		t.Fatalf("source %s, %d GETs, err %v", src, *gets-before, err)
	}
	for _, field := range []string{"spec", "status"} {
		if _, ok := u.Object[field]; ok {
			t.Errorf("the cached child has a %s", field)
		}
	}
	if len(u.GetManagedFields()) != 0 {
		t.Errorf("managedFields cached: %v", u.GetManagedFields())
	}
	if u.GroupVersionKind() != (schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}) {
		t.Errorf("kind = %v", u.GroupVersionKind())
	}
	if u.GetResourceVersion() != "42" || u.GetGeneration() != 3 || u.GetAnnotations()["kausality.io/mode"] != "enforce" {
		t.Errorf("metadata lost: rv %q generation %d annotations %v", u.GetResourceVersion(), u.GetGeneration(), u.GetAnnotations())
	}
	if ref := metav1.GetControllerOf(u); ref == nil || ref.UID != "w-uid" {
		t.Errorf("controller reference lost: %v", u.GetOwnerReferences())
	}
	// Changing the result does not change the cache.
	u.SetAnnotations(nil)
	again, _, _ := s.GetMetadata(ctx, deployments, "prod", "web")
	if again.GetAnnotations()["kausality.io/mode"] != "enforce" {
		t.Error("GetMetadata returned the cache's own metadata")
	}
	owned, err := s.Owned(ctx, deployments, "prod", "w-uid", true)
	if err != nil || len(owned) != 1 || owned[0].Object["spec"] != nil {
		t.Errorf("Owned from the cache of children: %v, %v", owned, err)
	}
	// A child never cached as a parent is read whole live.
	before = *gets
	whole, src, err := s.GetWhole(ctx, deployments, "prod", "web")
	if err != nil || src != FromLive || *gets != before+1 || whole.Object["spec"] == nil {
		t.Errorf("GetWhole of a child: source %s, %d GETs, err %v", src, *gets-before, err)
	}
}

func TestLeanTransforms(t *testing.T) {
	parent, err := LeanParent(web())
	if err != nil {
		t.Fatal(err)
	}
	u := parent.(*unstructured.Unstructured)
	if len(u.GetManagedFields()) != 1 || u.Object["spec"] == nil || u.Object["status"] == nil {
		t.Errorf("LeanParent: %v", u.Object)
	}
	// A parent whose status nobody wrote keeps no managedFields at all.
	bare := web()
	bare.SetManagedFields(bare.GetManagedFields()[:1])
	if out, _ := LeanParent(bare); out.(*unstructured.Unstructured).Object["metadata"].(map[string]interface{})["managedFields"] != nil {
		t.Errorf("LeanParent kept managedFields that own no observedGeneration: %v", bare.GetManagedFields())
	}
	child := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: web().GetManagedFields(),
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}}}
	out, err := LeanChild(child)
	if err != nil {
		t.Fatal(err)
	}
	if m := out.(*metav1.PartialObjectMetadata); m.ManagedFields != nil || m.Labels != nil || m.Annotations["a"] != "b" {
		t.Errorf("LeanChild: %+v", m.ObjectMeta)
	}
	// Anything else passes through.
	if out, err := LeanParent("tombstone"); err != nil || out != "tombstone" {
		t.Errorf("LeanParent of a non-object: %v %v", out, err)
	}
}

func TestStoreMapsKindsThroughDiscovery(t *testing.T) {
	s, _ := newStore(t, obj("example.com/v1", "Widget", "", "w"), obj("apps/v1", "Deployment", "prod", "web"))
	ctx := context.Background()

	// A cluster-scoped kind ignores the namespace it is asked in (a
	// namespaced child owned by a cluster-scoped parent).
	u, _, err := s.GetKindShared(ctx, schema.GroupKind{Group: "example.com", Kind: "Widget"}, "prod", "w")
	if err != nil || u.GetName() != "w" {
		t.Fatalf("cluster-scoped parent: %v %v", u, err)
	}
	// The group serves Widgets at two versions: a parent is read at the
	// one the cluster prefers, whatever version a reference names.
	if u.GetAPIVersion() != "example.com/v1" {
		t.Fatalf("parent read at %s, want the preferred example.com/v1", u.GetAPIVersion())
	}
	if _, _, err := s.GetKindShared(ctx, schema.GroupKind{Group: "apps", Kind: "Deployment"}, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	gvk, err := s.KindFor(deployments)
	if err != nil || gvk.Kind != "Deployment" {
		t.Fatalf("KindFor: %v %v", gvk, err)
	}
	if _, err := s.Mapping(schema.GroupVersionKind{Group: "ghosts.example.com", Version: "v1", Kind: "Ghost"}); err == nil {
		t.Fatal("an unserved kind mapped")
	}
	if _, _, err := s.GetKindShared(ctx, schema.GroupKind{Group: "ghosts.example.com", Kind: "Ghost"}, "prod", "g"); err == nil {
		t.Fatal("an unserved kind was read")
	}
}

// A cache of children tells the observers that hear of children of every
// change, with the child's identity, and every observer of a deletion.
func TestCachedChildrenReachObservers(t *testing.T) {
	u := web()
	u.SetUID("web-uid")
	s, _ := newStore(t, u)
	whole, meta := &recorder{learns: true}, &metadataRecorder{}
	s.AddObserver(whole)
	s.AddObserver(meta)
	ctx := context.Background()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitForMetadataSync(waitCtx, deployments); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			meta.mu.Lock()
			whole.mu.Lock()
			ok := done()
			whole.mu.Unlock()
			meta.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("the child's identity", func() bool { return len(meta.metadata) == 1 })
	if m := meta.metadata[0]; m.GetUID() != "web-uid" || m.GetName() != "web" || m.GetNamespace() != "prod" {
		t.Errorf("identity %s/%s %s", m.GetNamespace(), m.GetName(), m.GetUID())
	}
	if err := s.cacheMetadata.Resource(deployments).Namespace("prod").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the deletion", func() bool { return len(meta.forgot) == 1 && len(whole.forgot) == 1 })
	if meta.forgot[0] != "web-uid" || whole.forgot[0] != "web-uid" {
		t.Errorf("forgot %v and %v, want web-uid", meta.forgot, whole.forgot)
	}
	if len(whole.observed) != 0 {
		t.Errorf("a child reached an observer of whole parents: %v", whole.observed)
	}
}

// Any caller can name an object of any kind as the controller of what it
// writes: reading such a parent must not make the store cache every object
// of that kind. Only an admitted resource's parents are cached.
func TestAParentOfAResourceNotAdmittedIsReadLiveAndStartsNoCache(t *testing.T) {
	s, gets := newStore(t, web())
	ctx := context.Background()
	for range 3 {
		before := *gets
		u, src, err := s.GetKindShared(ctx, schema.GroupKind{Group: "apps", Kind: "Deployment"}, "prod", "web")
		if err != nil || u.GetName() != "web" || src != FromLive || *gets != before+1 {
			t.Fatalf("not admitted: source %s, %d GETs, err %v", src, *gets-before, err)
		}
	}
	if parents, _ := s.CachedResources(); len(parents) != 0 || s.CachesParentsOf(deployments) {
		t.Fatalf("caches of parents %v, admitted %v, before any admission", parents, s.CachesParentsOf(deployments))
	}
	if s.Synced(deployments) {
		t.Fatal("a cache of parents that was never admitted synced")
	}

	if err := s.AdmitParentKind(deployments.GroupVersion().WithKind("Deployment")); err != nil {
		t.Fatal(err)
	}
	if !s.CachesParentsOf(deployments) {
		t.Fatal("an admitted resource is not cached")
	}
	if _, _, err := s.GetShared(ctx, deployments, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	if parents, _ := s.CachedResources(); !slices.Equal(parents, []schema.GroupVersionResource{deployments}) {
		t.Fatalf("caches of parents after admission: %v", parents)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(waitCtx.Done(), func() bool { return s.Synced(deployments) }) {
		t.Fatal("the admitted cache did not sync")
	}
	before := *gets
	if _, src, err := s.GetKindShared(ctx, schema.GroupKind{Group: "apps", Kind: "Deployment"}, "prod", "web"); err != nil || src != FromCache || *gets != before {
		t.Fatalf("admitted and synced: source %s, %d GETs, err %v", src, *gets-before, err)
	}
}

// Namespaces are admitted from the start, and Secrets never are.
func TestNamespacesAreAdmittedAndSecretsNever(t *testing.T) {
	s, _ := newStore(t)
	if !s.CachesParentsOf(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}) {
		t.Fatal("namespaces are not cached")
	}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	s.AdmitParents(secrets)
	if s.CachesParentsOf(secrets) {
		t.Fatal("secrets are cached once admitted")
	}
}
