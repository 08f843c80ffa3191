//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// gadgetCachedWhileReconciling is a family whose Widget has a new spec it
// has not reconciled yet, with Gadget g (value a), created by the
// controller for that change, held in the proxy's metadata cache: the
// controller's next write of g is Expected and can be decided on the cache.
func gadgetCachedWhileReconciling(t *testing.T, prefix string) *wgFamily {
	t.Helper()
	ctx := context.Background()
	store := env.Interceptor.Objects()
	f := newWGFamily(t, prefix, "enforce")
	f.initialize()
	f.bumpSpec()
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates its Gadget while the Widget changes (expected)")
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mustf(t, store.WaitForMetadataSync(syncCtx, framework.GadgetGVR), "the cache of Gadgets syncs")
	eventually(t, time.Minute, "the cache holds Gadget g", func() error {
		if _, src, err := store.GetMetadata(ctx, framework.GadgetGVR, f.ns, "g"); err != nil || src != objects.FromCache {
			return fmt.Errorf("read from %s: %v", src, err)
		}
		return nil
	})
	return f
}

// waitGadgetCachedAsStored waits until the proxy's metadata cache holds
// Gadget name at the version kube-apiserver stores: a write decided then
// is decided on the cache, not on a live read of a cache that is behind.
func (f *wgFamily) waitGadgetCachedAsStored(name string) {
	f.t.Helper()
	ctx := context.Background()
	store := env.Interceptor.Objects()
	eventually(f.t, time.Minute, "the cache holds the stored Gadget "+name, func() error {
		stored, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cached, src, err := store.GetMetadata(ctx, framework.GadgetGVR, f.ns, name)
		if err != nil || src != objects.FromCache || cached.GetResourceVersion() != stored.GetResourceVersion() {
			return fmt.Errorf("cached %v from %s, stored %s (%v)", cached, src, stored.GetResourceVersion(), err)
		}
		return nil
	})
}
