//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// Another actor's change of a child is decided on the whole child, which
// the caches do not hold: the first such write reads it live, and the
// proxy keeps kube-apiserver's answer, so that the next write of that
// version is the one request that reaches kube-apiserver. A copy of any
// other version is not used: after a write the proxy did not see, the
// child is read live again; nor is an answer the caller asked for in
// another shape. The verdicts stay those of a live read: a write of the
// stored value is no desired change.
//
// The child is a ConfigMap of the Widget: a kind no test of this suite
// makes a parent through the proxy, which would cache it whole.
func TestAnotherActorsWritesAreDecidedOnTheStoredCopy(t *testing.T) {
	ctx := context.Background()
	store := env.Interceptor.Objects()
	f := newWGFamily(t, "copies", "enforce")
	owner := f.ownerRef()
	child := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": f.ns, "ownerReferences": []any{map[string]any{
			"apiVersion": owner.APIVersion, "kind": owner.Kind, "name": owner.Name, "uid": string(owner.UID),
			"controller": true, "blockOwnerDeletion": true}}},
		"data": map[string]any{"k": "a"},
	}}
	configMaps := func(a *wgActor) dynamic.ResourceInterface { return a.dyn.Resource(configMapsGVR).Namespace(f.ns) }
	_, err := configMaps(f.ctrl).Create(ctx, child, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the controller creates ConfigMap c while the Widget initializes")
	f.initialize()
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mustf(t, store.WaitForMetadataSync(syncCtx, configMapsGVR), "the cache of ConfigMaps syncs")
	if _, whole := store.GetCachedWhole(configMapsGVR, f.ns, "c"); whole {
		t.Fatal("ConfigMaps are cached whole, as parents: this test needs a kind the proxy caches as metadata only")
	}

	var last *unstructured.Unstructured
	write := func(what, category string, wantVerbs []string, do func() (*unstructured.Unstructured, error)) {
		t.Helper()
		eventually(t, time.Minute, "the cache holds the stored ConfigMap c", func() error {
			stored, err := f.admin.Resource(configMapsGVR).Namespace(f.ns).Get(ctx, "c", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cached, src, err := store.GetMetadata(ctx, configMapsGVR, f.ns, "c")
			if err != nil || src != objects.FromCache || cached.GetResourceVersion() != stored.GetResourceVersion() {
				return fmt.Errorf("cached %v from %s, stored %s (%v)", cached, src, stored.GetResourceVersion(), err)
			}
			return nil
		})
		start := time.Now()
		mark := wgMark(t)
		var err error
		last, err = do()
		mustf(t, err, "%s", what)
		wgExpectDecision(t, wgDecision(t, mark, "configmaps", f.ns, "c"), "Allow", category)
		verbs := configMapVerbsAudited(t, start, f.ns, wantVerbs[len(wantVerbs)-1], what)
		if !slices.Equal(verbs, wantVerbs) {
			t.Errorf("%s: kube-apiserver saw %v of ConfigMap c, want %v", what, verbs, wantVerbs)
		}
	}
	alicePatches := func(value string) func() (*unstructured.Unstructured, error) {
		return func() (*unstructured.Unstructured, error) {
			return configMaps(f.alice).Patch(ctx, "c", types.MergePatchType, []byte(`{"data":{"k":"`+value+`"}}`), metav1.PatchOptions{})
		}
	}

	write("alice's first change of the ConfigMap reads it live", "NewOrigin", []string{"get", "patch"}, alicePatches("b"))
	write("alice's next change is decided on the answer the proxy kept", "NewOrigin", []string{"patch"}, alicePatches("c"))
	write("alice writes the value stored: no desired change, told from the copy", "NoDesiredChange", []string{"patch"}, alicePatches("c"))
	write("alice asks for the answer to her change as PartialObjectMetadata", "NewOrigin", []string{"patch"}, func() (*unstructured.Unstructured, error) {
		data, err := f.alice.kube.CoreV1().RESTClient().Patch(types.MergePatchType).Namespace(f.ns).Resource("configmaps").Name("c").
			SetHeader("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").
			Body([]byte(`{"data":{"k":"c2"}}`)).DoRaw(ctx)
		if err != nil {
			return nil, err
		}
		answer := &unstructured.Unstructured{}
		if err := answer.UnmarshalJSON(data); err != nil || answer.GetKind() != "PartialObjectMetadata" {
			return nil, fmt.Errorf("kube-apiserver answered %s, not the ConfigMap's metadata (%v)", data, err)
		}
		return answer, nil
	})
	write("an answer in another shape is not kept as the object: the stored value is read live, no desired change", "NoDesiredChange",
		[]string{"get", "patch"}, alicePatches("c2"))
	write("alice's update of the version she was answered is decided on the copy of that version", "NewOrigin", []string{"update"},
		func() (*unstructured.Unstructured, error) {
			c := last.DeepCopy()
			mustf(t, unstructured.SetNestedField(c.Object, "d", "data", "k"), "set data.k")
			return configMaps(f.alice).Update(ctx, c, metav1.UpdateOptions{})
		})

	_, err = f.admin.Resource(configMapsGVR).Namespace(f.ns).Patch(ctx, "c", types.MergePatchType, []byte(`{"data":{"k":"e"}}`), metav1.PatchOptions{})
	mustf(t, err, "an administrator changes the ConfigMap directly")
	write("after a write the proxy did not see, the copy is of an older version: read live again", "NewOrigin", []string{"get", "patch"}, alicePatches("f"))
	stored, err := f.admin.Resource(configMapsGVR).Namespace(f.ns).Get(ctx, "c", metav1.GetOptions{})
	mustf(t, err, "read ConfigMap c")
	if v, _, _ := unstructured.NestedString(stored.Object, "data", "k"); v != "f" {
		t.Fatalf("data.k %q, want f", v)
	}
}

// configMapVerbsAudited waits until kube-apiserver's audit log shows verb
// on ConfigMap c in ns since start, and returns the verbs of every request
// of that ConfigMap that reached kube-apiserver since start, in order.
func configMapVerbsAudited(t *testing.T, start time.Time, ns, verb, what string) []string {
	t.Helper()
	var verbs []string
	eventually(t, time.Minute, what+" is audited", func() error {
		seen := auditedSince(t, start, func(e auditv1.Event) bool {
			return e.Stage == auditv1.StageResponseComplete && e.ObjectRef != nil &&
				e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == "c"
		})
		verbs = verbs[:0]
		for _, e := range seen {
			verbs = append(verbs, e.Verb)
		}
		if !slices.Contains(verbs, verb) {
			return fmt.Errorf("no %s yet:%s", verb, describeEvents(seen))
		}
		return nil
	})
	return verbs
}
