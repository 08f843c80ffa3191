//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

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
