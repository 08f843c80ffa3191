//go:build !kind

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// A JSON patch and a server-side apply by the parent's controller while
// the parent reconciles are decided on the child's cached metadata: the
// write is the one request that reaches kube-apiserver, as for a merge
// patch. The Kausality annotations stay the proxy's through both shapes,
// and a controller's JSON patch under the settled parent is still drift,
// decided on the child read whole.
func TestMetadataDecidesJSONPatchAndApply(t *testing.T) {
	ctx := context.Background()
	f := gadgetCachedWhileReconciling(t, "mdpatch")
	const forged = `[{"kind":"Gadget","mutation":"spec","generation":999,"initiator":"forger","policy":"any"}]`
	gadgetPath := "/namespaces/" + f.ns + "/gadgets/g"
	env.Recorder.Watch(gadgetPath)
	oneRequest := func(what string, write func() error) {
		t.Helper()
		// A cache behind the stored Gadget fails the proxy's precondition
		// and the write goes round again: that is not what is counted.
		f.waitGadgetCachedAsStored("g")
		before := len(env.Recorder.Requests(gadgetPath))
		start := time.Now()
		mark := wgMark(t)
		mustf(t, write(), "%s", what)
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "Expected")
		if sent := env.Recorder.Requests(gadgetPath)[before:]; len(sent) != 1 || sent[0].Method != http.MethodPatch {
			t.Fatalf("%s forwarded %d requests, want the one PATCH: %+v", what, len(sent), methods(sent))
		}
		seen := gadgetRequestsAudited(t, start, f.ns, "the write")
		if len(seen) != 1 {
			t.Fatalf("%s made %d requests of the Gadget reach kube-apiserver, want the one PATCH:%s", what, len(seen), describeEvents(seen))
		}
	}
	forgedKept := func(what string) {
		t.Helper()
		g, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(ctx, "g", metav1.GetOptions{})
		mustf(t, err, "reading Gadget g")
		if v, ok := g.GetAnnotations()[annotations.Allowances]; ok {
			t.Fatalf("%s put %s on the Gadget: %q", what, annotations.Allowances, v)
		}
		if g.GetAnnotations()[wgAnnTrace] == "" {
			t.Fatalf("%s lost the Gadget's %s", what, wgAnnTrace)
		}
	}

	jsonPatch := fmt.Sprintf(`[{"op":"replace","path":"/spec/value","value":"b"},`+
		`{"op":"add","path":"/metadata/annotations/kausal.io~1allowances","value":%q}]`, forged)
	oneRequest("an Expected JSON patch", func() error {
		_, err := f.gadgets(f.ctrl).Patch(ctx, "g", types.JSONPatchType, []byte(jsonPatch), metav1.PatchOptions{FieldManager: wgManager})
		return err
	})
	if v := f.gadgetValue("g"); v != "b" {
		t.Fatalf("the JSON patch was not applied: spec.value %q", v)
	}
	forgedKept("a JSON patch")

	owner := f.ownerRef()
	apply, err := json.Marshal(map[string]any{
		"apiVersion": wgAPIVersion, "kind": "Gadget",
		"metadata": map[string]any{"name": "g", "namespace": f.ns, "ownerReferences": []metav1.OwnerReference{owner},
			"annotations": map[string]string{annotations.Allowances: forged}},
		"spec": map[string]any{"value": "c"},
	})
	mustf(t, err, "the apply configuration")
	oneRequest("an Expected server-side apply", func() error {
		_, err := f.gadgets(f.ctrl).Patch(ctx, "g", types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: wgManager, Force: ptr.To(true)})
		return err
	})
	if v := f.gadgetValue("g"); v != "c" {
		t.Fatalf("the apply was not applied: spec.value %q", v)
	}
	forgedKept("a server-side apply")

	// Settled, the controller's JSON patch is drift: held, and the stored
	// value shown, which only the whole Gadget holds.
	f.setStatus(true)
	drift := []byte(`[{"op":"replace","path":"/spec/value","value":"d"}]`)
	eventually(t, time.Minute, "the proxy sees the Widget settled", func() error {
		_, err := f.gadgets(f.ctrl).Patch(ctx, "g", types.JSONPatchType, drift,
			metav1.PatchOptions{FieldManager: wgManager, DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return fmt.Errorf("the controller's dry run is still Expected")
		}
		return nil
	})
	mark := wgMark(t)
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.JSONPatchType, drift, metav1.PatchOptions{FieldManager: wgManager})
	s := wgStatus(t, err, 403, "the controller's JSON patch under a settled Widget")
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")
	if want := `spec.value ("c" → "d")`; !strings.Contains(s.Message, want) {
		t.Errorf("the denial does not show the stored value (%s): %s", want, s.Message)
	}
	if v := f.gadgetValue("g"); v != "c" {
		t.Fatalf("the drift went through: spec.value %q", v)
	}
}

// gadgetRequestsAudited waits until kube-apiserver's audit log shows a
// patch of the Gadget g in ns since start, and returns every request of
// that Gadget that reached kube-apiserver: the proxy's own reads are not
// forwarded requests, so they show only here.
func gadgetRequestsAudited(t *testing.T, start time.Time, ns, what string) []auditv1.Event {
	t.Helper()
	var seen []auditv1.Event
	eventually(t, time.Minute, what+" is audited", func() error {
		seen = auditedSince(t, start, func(e auditv1.Event) bool {
			return e.Stage == auditv1.StageResponseComplete && e.ObjectRef != nil &&
				e.ObjectRef.Resource == "gadgets" && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == "g"
		})
		for _, e := range seen {
			if e.Verb == "patch" {
				return nil
			}
		}
		return fmt.Errorf("not yet:%s", describeEvents(seen))
	})
	return seen
}
