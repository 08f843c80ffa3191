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

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// Another actor's change of a child is decided on the whole child, which
// the caches do not hold: the first such write reads it live, and the
// proxy keeps kube-apiserver's answer, so that the next write of that
// version is the one request that reaches kube-apiserver. A copy of any
// other version is not used: after a write the proxy did not see, the
// child is read live again. The verdicts stay those of a live read: a
// write of the stored value is no desired change.
func TestAnotherActorsWritesAreDecidedOnTheStoredCopy(t *testing.T) {
	ctx := context.Background()
	store := env.Interceptor.Objects()
	f := newWGFamily(t, "copies", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates Gadget g")
	f.initialize()
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mustf(t, store.WaitForMetadataSync(syncCtx, framework.GadgetGVR), "the cache of Gadgets syncs")

	var last *unstructured.Unstructured
	write := func(what, category string, wantVerbs []string, do func() (*unstructured.Unstructured, error)) {
		t.Helper()
		f.waitGadgetCachedAsStored("g")
		start := time.Now()
		mark := wgMark(t)
		var err error
		last, err = do()
		mustf(t, err, "%s", what)
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", category)
		verbs := gadgetVerbsAudited(t, start, f.ns, wantVerbs[len(wantVerbs)-1], what)
		if !slices.Equal(verbs, wantVerbs) {
			t.Errorf("%s: kube-apiserver saw %v of Gadget g, want %v", what, verbs, wantVerbs)
		}
	}
	alicePatches := func(value string) func() (*unstructured.Unstructured, error) {
		return func() (*unstructured.Unstructured, error) {
			return f.gadgets(f.alice).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"`+value+`"}}`), metav1.PatchOptions{})
		}
	}

	write("alice's first change of the Gadget reads it live", "NewOrigin", []string{"get", "patch"}, alicePatches("b"))
	write("alice's next change is decided on the answer the proxy kept", "NewOrigin", []string{"patch"}, alicePatches("c"))
	write("alice writes the value stored: no desired change, told from the copy", "NoDesiredChange", []string{"patch"}, alicePatches("c"))
	write("alice asks for the answer to her change as PartialObjectMetadata", "NewOrigin", []string{"patch"}, func() (*unstructured.Unstructured, error) {
		path := fmt.Sprintf("/apis/%s/namespaces/%s/%s/g", framework.GadgetGVR.GroupVersion(), f.ns, framework.GadgetGVR.Resource)
		data, err := f.alice.kube.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath(path).
			SetHeader("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").
			Body([]byte(`{"spec":{"value":"c2"}}`)).DoRaw(ctx)
		if err != nil {
			return nil, err
		}
		answer := &unstructured.Unstructured{}
		if err := answer.UnmarshalJSON(data); err != nil || answer.GetKind() != "PartialObjectMetadata" {
			return nil, fmt.Errorf("kube-apiserver answered %s, not the Gadget's metadata (%v)", data, err)
		}
		return answer, nil
	})
	write("an answer in another shape is not kept as the object: the stored value is read live, no desired change", "NoDesiredChange",
		[]string{"get", "patch"}, alicePatches("c2"))
	write("alice's update of the version she was answered is decided on the copy of that version", "NewOrigin", []string{"update"},
		func() (*unstructured.Unstructured, error) {
			g := last.DeepCopy()
			mustf(t, unstructured.SetNestedField(g.Object, "d", "spec", "value"), "set spec.value")
			return f.gadgets(f.alice).Update(ctx, g, metav1.UpdateOptions{})
		})

	_, err = f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"e"}}`), metav1.PatchOptions{})
	mustf(t, err, "an administrator changes the Gadget directly")
	write("after a write the proxy did not see, the copy is of an older version: read live again", "NewOrigin", []string{"get", "patch"}, alicePatches("f"))
	if v := f.gadgetValue("g"); v != "f" {
		t.Fatalf("spec.value %q, want f", v)
	}
}

// gadgetVerbsAudited waits until kube-apiserver's audit log shows verb on
// Gadget g in ns since start, and returns the verbs of every request of
// that Gadget that reached kube-apiserver since start, in order.
func gadgetVerbsAudited(t *testing.T, start time.Time, ns, verb, what string) []string {
	t.Helper()
	var verbs []string
	eventually(t, time.Minute, what+" is audited", func() error {
		seen := auditedSince(t, start, func(e auditv1.Event) bool {
			return e.Stage == auditv1.StageResponseComplete && e.ObjectRef != nil &&
				e.ObjectRef.Resource == "gadgets" && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == "g"
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
