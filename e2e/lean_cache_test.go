//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// The proxy caches children as metadata and still decides as it did with
// whole children: an Expected write is decided from the cache and is the
// one request forwarded; a drift needs the stored content, which is read
// live, and is still held with the stored value in its message.
func TestLeanCacheDecidesAsBefore(t *testing.T) {
	ctx := context.Background()
	store := env.Interceptor.Objects()
	f := gadgetCachedWhileReconciling(t, "lean")

	// The cached Gadget is its metadata: nothing of its spec, status or
	// managedFields.
	g, src, err := store.GetMetadata(ctx, framework.GadgetGVR, f.ns, "g")
	mustf(t, err, "reading the cached Gadget g")
	if src != objects.FromCache {
		t.Fatalf("Gadget g read from %s, not the cache", src)
	}
	for _, field := range []string{"spec", "status"} {
		if _, ok := g.Object[field]; ok {
			t.Fatalf("the cached Gadget holds its %s: %v", field, g.Object)
		}
	}
	if len(g.GetManagedFields()) > 0 {
		t.Fatalf("the cached Gadget holds managedFields: %v", g.GetManagedFields())
	}
	if metav1.GetControllerOf(g) == nil {
		t.Fatalf("the cached Gadget lost its controller reference: %v", g.Object)
	}

	// The Widget is still reconciling: the controller's write is Expected,
	// decided on the cached metadata, and the write itself is the only
	// request that reaches kube-apiserver.
	gadgetPath := "/namespaces/" + f.ns + "/gadgets/g"
	env.Recorder.Watch(gadgetPath)
	mark := wgMark(t)
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"b"}}`), metav1.PatchOptions{FieldManager: wgManager})
	mustf(t, err, "the controller carries out the Widget's change")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "Expected")
	if sent := env.Recorder.Requests(gadgetPath); len(sent) != 1 || sent[0].Method != http.MethodPatch {
		t.Fatalf("an Expected write sent %d requests upstream, want the one PATCH: %+v", len(sent), methods(sent))
	}

	// Settled, the same controller's change is drift: the verdict depends
	// on the stored Gadget, which is read whole, so the denial shows the
	// stored value.
	f.setStatus(true)
	eventually(t, time.Minute, "the proxy sees the Widget settled", func() error {
		_, err := f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"c"}}`),
			metav1.PatchOptions{FieldManager: wgManager, DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return fmt.Errorf("the controller's dry run is still Expected")
		}
		return nil
	})
	mark = wgMark(t)
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"c"}}`), metav1.PatchOptions{FieldManager: wgManager})
	s := wgStatus(t, err, 403, "the controller's change under a settled Widget")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")
	if want := `spec.value ("b" → "c")`; !strings.Contains(s.Message, want) {
		t.Errorf("the denial does not show the stored value (%s): %s", want, s.Message)
	}
	if v := f.gadgetValue("g"); v != "b" {
		t.Fatalf("the drift went through: spec.value %q", v)
	}

	// A person's write of what is stored changes no desired state: it is
	// no new origin, though the cached metadata alone cannot tell.
	mark = wgMark(t)
	_, err = f.gadgets(f.alice).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"b"}}`), metav1.PatchOptions{})
	mustf(t, err, "alice writes what is stored")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "NoDesiredChange")

	// Frozen, a write that changes the Gadget is refused; a write of
	// what is stored is not. Its cached metadata cannot tell the two
	// apart: the verdict is made again on the Gadget read whole.
	freeze := "true"
	f.annotateWidget(map[string]*string{wgAnnFreeze: &freeze})
	eventually(t, time.Minute, "alice's change under the frozen Widget is refused", func() error {
		_, err := f.gadgets(f.alice).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"z"}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return fmt.Errorf("alice's change went through while the Widget is frozen")
		}
		return nil
	})
	mark = wgMark(t)
	_, err = f.gadgets(f.alice).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"b"}}`), metav1.PatchOptions{})
	mustf(t, err, "alice writes what is stored under the frozen Widget")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "NoDesiredChange")
}

// A ConfigMap with a large payload, in a namespace nobody writes through
// the proxy, costs the proxy its metadata: the payload is never cached.
func TestLeanCacheHoldsNoPayloadOfUndecidedObjects(t *testing.T) {
	ctx := context.Background()
	store := env.Interceptor.Objects()
	admin := directClient(t)
	ns := wgNamespace(t, "lean-bystander", "")
	payload := strings.Repeat("x", 256<<10)
	_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Annotations: map[string]string{"team": "payments"}},
		Data:       map[string]string{"blob": payload},
	}, metav1.CreateOptions{FieldManager: "someone-else"})
	mustf(t, err, "a ConfigMap of 256 KiB, created directly at kube-apiserver")

	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mustf(t, store.WaitForMetadataSync(syncCtx, configMapsGVR), "the cache of ConfigMaps syncs")
	eventually(t, time.Minute, "the cache holds the ConfigMap", func() error {
		cm, src, err := store.GetMetadata(ctx, configMapsGVR, ns, "big")
		if err != nil {
			return err
		}
		if src != objects.FromCache {
			return fmt.Errorf("read %s", src)
		}
		for _, field := range []string{"data", "binaryData"} {
			if _, ok := cm.Object[field]; ok {
				t.Fatalf("the cache holds the ConfigMap's %s", field)
			}
		}
		if len(cm.GetManagedFields()) > 0 {
			t.Fatalf("the cache holds the ConfigMap's managedFields: %v", cm.GetManagedFields())
		}
		if cm.GetAnnotations()["team"] != "payments" {
			t.Fatalf("the cached ConfigMap lost its annotations: %v", cm.GetAnnotations())
		}
		return nil
	})
	// No cache of whole ConfigMaps: a whole one is read live.
	whole, src, err := store.GetWhole(ctx, configMapsGVR, ns, "big")
	mustf(t, err, "the whole ConfigMap, read live")
	if src != objects.FromLive || len(whole.Object["data"].(map[string]any)["blob"].(string)) != len(payload) {
		t.Fatalf("the whole ConfigMap came from %s", src)
	}
}

func methods(rs []framework.Recorded) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}
