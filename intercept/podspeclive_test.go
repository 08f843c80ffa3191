package intercept

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// A resize decided on a pod's cached metadata is decided again on the pod
// read live as the same change of its spec: applying its body to the pod
// would show no change where kube-apiserver takes only the resources, and
// where the body changes nothing at all, it is still taken for a resize.
func TestAPodSpecWriteStaysAChangeOnTheLivePod(t *testing.T) {
	live := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "apps", "resourceVersion": "7"},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": "pause"}}},
	}}
	change := []desired.Change{{Path: podSpecPath("resize")}}
	f := facts{req: &writeRequest{w: &write{info: &request.RequestInfo{Name: "p", Subresource: "resize"}, verb: "patch", sub: podSpecSubresource}},
		op: decision.Update, oldIsMetadata: true, changed: true, changes: change}
	got, err := withLiveChild(f, live)
	if err != nil {
		t.Fatal(err)
	}
	if !got.changed || len(got.changes) != 1 || got.changes[0].Path != "spec.containers[*].resources" || !got.childLive || got.new == nil {
		t.Fatalf("changed=%v changes=%v live=%v new=%v, want the resize's change on the live pod", got.changed, got.changes, got.childLive, got.new)
	}
}
