package kubectlplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/report/drifts"
)

// The drifts UI approves the drift the person selected: the record's
// parent, at the spec the drift was detected under. Slack refuses a click
// when the parent was deleted and created again (another uid) or its spec
// moved on since the drift (escalation.ApprovableGeneration); the UI must
// not write an approval for the parent's current generation in either
// case, which would admit a drift nobody has seen.
func TestTheDriftsUIDecidesOnlyOnTheParentOfTheDrift(t *testing.T) {
	// The record: drift of ReplicaSet web-1 under Deployment shop/web (uid
	// d-1) at generation 4.
	rec, err := drifts.DecodeRecord(recordConfigMap(t, "0000000000000001", "shop", "web-1", annotations.ModeEnforce, true, time.Minute, false, replicas("3", "2")))
	if err != nil {
		t.Fatal(err)
	}
	// What the proxy records besides (recordConfigMap leaves them out):
	// the parent's uid and its spec at detection.
	rec.Report.Spec.Parent.UID = "d-1"
	rec.State.ParentSpecHash = settle.SpecHash(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "spec": map[string]any{"replicas": int64(3)}}})
	row := rowOf(rec)
	for _, tc := range []struct {
		name     string
		uid      string
		key      string
		replicas int64
		// want is the approvals written, "" for a refusal.
		want string
	}{
		{name: "recreated parent, another uid", uid: "d-2", key: "a", replicas: 9},
		{name: "same parent, spec changed since", uid: "d-1", key: "a", replicas: 9},
		{name: "same parent, spec changed since, approval for the generation", uid: "d-1", key: "g", replicas: 9},
		{name: "recreated parent: no rejection either", uid: "d-2", key: "r", replicas: 3},
		{name: "same parent, same spec at a later generation: approved for it", uid: "d-1", key: "a", replicas: 3, want: `"generation":7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Now: generation 7, replicas 9 (spec changed since the drift).
			parent := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "apps/v1", "kind": "Deployment",
				"metadata": map[string]any{"name": "web", "namespace": "shop", "uid": tc.uid, "generation": int64(7), "resourceVersion": "10"},
				"spec":     map[string]any{"replicas": tc.replicas},
			}}
			gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
			scheme := runtime.NewScheme()
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{gvr: "DeploymentList"}, parent)
			mapper := meta.NewDefaultRESTMapper(nil)
			mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
			a := &driftActor{o: &options{now: func() time.Time { return driftsNow }}, c: &cluster{dyn: dyn, mapper: mapper}, user: "alice"}
			act, _ := actionFor(tc.key)
			summary, err := a.apply(context.Background(), actionRequest{action: act, row: row, input: "not ours"})
			got, _ := dyn.Resource(gvr).Namespace("shop").Get(context.Background(), "web", metav1.GetOptions{})
			if tc.want != "" {
				if err != nil || !strings.Contains(got.GetAnnotations()[annotations.Approvals], tc.want) {
					t.Errorf("%s: %v; approvals %q, want %s", act.name, err, got.GetAnnotations()[annotations.Approvals], tc.want)
				}
				return
			}
			if err == nil {
				t.Errorf("%s of drift %s (parent generation %d) was applied to a parent that is not the drift's any more: %s\nannotations now: %v",
					act.name, row.ID, row.ParentGeneration, summary, got.GetAnnotations())
			}
			if len(got.GetAnnotations()) != 0 {
				t.Errorf("%s wrote %v on a parent that is not the drift's", act.name, got.GetAnnotations())
			}
		})
	}
}
