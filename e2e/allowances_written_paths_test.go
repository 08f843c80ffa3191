//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// TestAllowancesMergePatchOnWrittenPaths: a controller's merge patch of a
// child the proxy caches as metadata, under a parent whose allowances
// cover what the patch writes, is checked on the paths the patch names:
// the patch is the one request of the child that reaches kube-apiserver,
// with no read of the child. A merge patch of a field no allowance covers
// is still refused, naming the field, and never forwarded.
func TestAllowancesMergePatchOnWrittenPaths(t *testing.T) {
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	policies := dyn.Resource(v1alpha1.AllowancePoliciesGVR)
	policy := policyObject(t, fmt.Sprintf(`apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: e2e-written-paths}
spec:
  match: {kind: Widget, group: %[1]s, fields: [spec.size]}
  subjects:
  - {kind: User, name: alice, mayInitiate: true}
  - {kind: ServiceAccount, namespace: %[2]s, name: %[3]s}
  allow: [{kind: Gadget, group: %[1]s, mutations: [create, spec.value]}]
`, framework.TestGroup, wgControllerNS, wgControllerSA))
	created, err := policies.Create(ctx, policy, metav1.CreateOptions{})
	mustf(t, err, "creating the allowance policy")
	t.Cleanup(func() { _ = policies.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
	expectAllowancePolicyCondition(t, dyn, created.GetName(), created.GetGeneration(), metav1.ConditionTrue, "Compiled")

	f := newWGFamily(t, "alwpaths", "enforce")
	_, err = directClient(t).CoreV1().Namespaces().Patch(ctx, f.ns, types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"enforce"}}}`, annotations.AllowanceMode)), metav1.PatchOptions{})
	mustf(t, err, "turning allowances on in %s", f.ns)
	// Widgets are cluster-scoped: the mode is the Widget's own.
	mode := "enforce"
	f.annotateWidget(map[string]*string{annotations.AllowanceMode: &mode})
	f.initialize()
	// alice's change grants the controller Gadget creates and spec.value
	// changes; nothing reconciles the Widget, so they stay unconsumed.
	f.bumpSpec()
	eventually(t, time.Minute, "the Widget carries alice's allowances", func() error {
		if v := f.getWidget().GetAnnotations()[annotations.Allowances]; !strings.Contains(v, `"mutation":"spec.value"`) {
			return fmt.Errorf("allowances %q", v)
		}
		return nil
	})
	mark := wgMark(t)
	_, err = f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates its Gadget under alice's allowance")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "Expected")

	store := env.Interceptor.Objects()
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mustf(t, store.WaitForMetadataSync(syncCtx, framework.GadgetGVR), "the cache of Gadgets syncs")
	f.waitGadgetCachedAsStored("g")

	gadgetPath := "/namespaces/" + f.ns + "/gadgets/g"
	env.Recorder.Watch(gadgetPath)
	before := len(env.Recorder.Requests(gadgetPath))
	start := time.Now()
	mark = wgMark(t)
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"b"}}`), metav1.PatchOptions{FieldManager: wgManager})
	mustf(t, err, "the controller's merge patch of spec.value, which alice's allowance covers")
	line := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, line, "Allow", "Expected")
	if line.Str("allowanceMode") != "enforce" {
		t.Errorf("the merge patch was not checked against the allowances: %v", line)
	}
	if sent := env.Recorder.Requests(gadgetPath)[before:]; len(sent) != 1 || sent[0].Method != http.MethodPatch {
		t.Fatalf("the allowed merge patch forwarded %d requests, want the one PATCH: %+v", len(sent), methods(sent))
	}
	seen := gadgetRequestsAudited(t, start, f.ns, "the merge patch")
	if len(seen) != 1 {
		t.Fatalf("the allowed merge patch made %d requests of the Gadget reach kube-apiserver, want the one PATCH:%s", len(seen), describeEvents(seen))
	}

	before = len(env.Recorder.Requests(gadgetPath))
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"replicas":7}}`), metav1.PatchOptions{FieldManager: wgManager})
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusForbidden {
		t.Fatalf("the controller's merge patch of spec.replicas, which nothing allows: %v, want 403", err)
	}
	named := false
	for _, c := range status.Status().Details.Causes {
		named = named || c.Type == decision.CauseAllowance && c.Field == "spec.replicas"
	}
	if !named || !strings.Contains(status.Status().Message, "spec.replicas") {
		t.Errorf("the denial does not name spec.replicas: %s %+v", status.Status().Message, status.Status().Details.Causes)
	}
	for _, r := range env.Recorder.Requests(gadgetPath)[before:] {
		if r.Method == http.MethodPatch {
			t.Errorf("the refused merge patch reached kube-apiserver: %s %s", r.Method, r.Path)
		}
	}
}
