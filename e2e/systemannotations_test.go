//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A write that changes a system annotation gets the stored value put back,
// read from the proxy's cache. The proxy writes those annotations itself,
// from any replica, and its cache may not have seen the latest yet: the
// write lands only on the version the put-back value was read from, so a
// newer value is never overwritten with an older one. Each round writes a
// new record directly (as another replica's side write would) and at once
// has alice overwrite it through the proxy, before the cache can be sure
// to have seen it.
func TestSystemAnnotationsPutBackNeverOverwriteANewerValue(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "sysver", "")
	f.initialize()
	for round := range 20 {
		newer := fmt.Sprintf("%016d", round+1)
		f.annotateWidget(map[string]*string{idAnnControllers: &newer})
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"forged","round":"%d"}}}`, idAnnControllers, round)
		_, err := f.alice.dyn.Resource(framework.WidgetGVR).Patch(ctx, f.widget, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		mustf(t, err, "round %d: alice's patch of the Widget's annotations through the proxy", round)
		ann := f.getWidget().GetAnnotations()
		if got := ann[idAnnControllers]; got != newer {
			t.Fatalf("round %d: %s is %q after alice's patch, want the newer %q kept", round, idAnnControllers, got, newer)
		}
		if ann["round"] != fmt.Sprint(round) {
			t.Fatalf("round %d: alice's own annotation is %q", round, ann["round"])
		}
	}
}
