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

// A JSON patch that tests the resourceVersion (optimistic concurrency
// without a read-modify-write) names the version its client just saw,
// which the proxy's cache may not have yet: the proxy must not refuse it
// for failing on its copy. Each round changes the Widget (a parent, which
// the proxy caches whole) directly and at once has alice patch it through
// the proxy, testing the version the change returned.
func TestAJSONPatchTestingTheLatestVersionIsNotRefusedByALaggingCache(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "jsontest", "")
	f.initialize()
	widgets := f.alice.dyn.Resource(framework.WidgetGVR)
	for round := range 20 {
		changed, err := f.admin.Resource(framework.WidgetGVR).Patch(ctx, f.widget, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{"direct":"r%d"}}}`, round)), metav1.PatchOptions{})
		mustf(t, err, "round %d: change the Widget directly", round)
		patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/resourceVersion","value":%q},{"op":"add","path":"/metadata/labels/seen","value":"r%d"}]`,
			changed.GetResourceVersion(), round)
		patched, err := widgets.Patch(ctx, f.widget, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		mustf(t, err, "round %d: alice's JSON patch testing resourceVersion %s, which kube-apiserver has just returned", round, changed.GetResourceVersion())
		if got := patched.GetLabels()["seen"]; got != fmt.Sprintf("r%d", round) {
			t.Fatalf("round %d: label seen=%q after the patch", round, got)
		}
	}
}
