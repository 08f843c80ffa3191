//go:build !kind

package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A controller that reverts a person's edit by PATCH, while the proxy's
// cache of the child still shows the state before the edit, is held: the
// verdict "no desired change" computed from the cache is confirmed against
// kube-apiserver before the write goes through. The proxy's watch of the
// child is held back for the test, so the cache is stale for certain.
func TestStoredStaleCacheRevertIsHeld(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "stale", "enforce")
	f.initialize()
	f.bumpSpec()
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates its Gadget while the Widget changes (expected)")
	f.setStatus(true)
	// An update makes the proxy read the stored Gadget, which starts its
	// Gadget cache; it lists and syncs within milliseconds.
	_, err = f.setValue("g", "a", false)
	mustf(t, err, "the controller's rewrite of what is stored")
	time.Sleep(time.Second)

	release := env.Watches.Hold("gadgets")
	t.Cleanup(release)
	_, err = f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Patch(ctx, "g", types.MergePatchType,
		[]byte(`{"spec":{"value":"b"}}`), metav1.PatchOptions{})
	mustf(t, err, "a person edits the Gadget behind the proxy's back")

	mark := wgMark(t)
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"a"}}`), metav1.PatchOptions{FieldManager: wgManager})
	wgStatus(t, err, 403, "the controller's revert against a stale cache")
	d := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Deny", "DriftUnapproved")
	wgExpectField(t, d, "confirmed", true)
	release()
	if v := f.gadgetValue("g"); v != "b" {
		t.Fatalf("the revert went through: spec.value %q", v)
	}
}
