//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A controller's drift is confirmed with kube-apiserver before it is
// acted on: a dry run of the write, on the stored child. The first drift
// of a child reads it live beside the dry run; the proxy keeps
// kube-apiserver's answer to the write, and the controller's next update,
// naming the version it was answered, is confirmed on that copy: the dry
// run succeeds only while that version is the stored one, so a live read
// would add nothing. The verdict stays a confirmed drift. An update
// naming a version no longer stored is refused by kube-apiserver itself,
// with its own conflict, and nothing is written. A patch, which names no
// version, has its dry run pinned to the copy's by the proxy.
func TestDriftOfAnUpdateIsConfirmedOnTheCopyItNames(t *testing.T) {
	ctx := context.Background()
	f := newInitializedGadgetFamily(t, "drfcopy", "log")
	f.settleGadget("g", "Allow/DriftUnapproved")

	var last *unstructured.Unstructured
	update := func(what string, from *unstructured.Unstructured, value string, wantVerbs []string) error {
		t.Helper()
		f.waitGadgetCachedAsStored("g")
		g := from.DeepCopy()
		mustf(t, unstructured.SetNestedField(g.Object, value, "spec", "value"), "set spec.value")
		start := time.Now()
		mark := wgMark(t)
		answer, err := f.gadgets(f.ctrl).Update(ctx, g, metav1.UpdateOptions{FieldManager: wgManager})
		verbs := gadgetVerbsAudited(t, start, f.ns, "g", wantVerbs[len(wantVerbs)-1], what)
		slices.Sort(verbs)
		want := slices.Clone(wantVerbs)
		slices.Sort(want)
		if !slices.Equal(verbs, want) {
			t.Errorf("%s: kube-apiserver saw %v of Gadget g, want %v", what, verbs, want)
		}
		if err != nil {
			return err
		}
		last = answer
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "DriftUnapproved")
		wgExpectField(t, d, "drift", true)
		wgExpectField(t, d, "confirmed", true)
		return nil
	}

	// The probes' live reads left a copy; a change the proxy does not see
	// makes it one of an older version.
	stored, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Patch(ctx, "g", types.MergePatchType, []byte(`{"metadata":{"labels":{"seen":"no"}}}`), metav1.PatchOptions{})
	mustf(t, err, "an administrator labels Gadget g directly")
	mustf(t, update("the first drift of g reads it live beside the dry run", stored, "b", []string{"get", "dry-run update", "update"}),
		"the controller's first drift of g")
	mustf(t, update("the next drift, of the version the controller was answered, is confirmed on the proxy's copy of it", last, "c",
		[]string{"dry-run update", "update"}), "the controller's next drift of g")
	if got := f.gadgetValue("g"); got != "c" {
		t.Fatalf("spec.value %q after the drifts, want c", got)
	}

	answered := last
	_, err = f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"z"}}`), metav1.PatchOptions{})
	mustf(t, err, "an administrator changes Gadget g directly")
	err = update("an update of a version no longer stored is refused by kube-apiserver's dry run", answered, "d", []string{"dry-run update"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("the update of a version no longer stored answered %v, want kube-apiserver's 409 Conflict", err)
	}
	if got := f.gadgetValue("g"); got != "z" {
		t.Fatalf("spec.value %q after the refused update, want z", got)
	}

	// A patch names no version: the proxy pins its dry run to the copy's.
	patchValue := func(what, value string, wantVerbs []string) {
		t.Helper()
		f.waitGadgetCachedAsStored("g")
		start := time.Now()
		mark := wgMark(t)
		_, err := f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"`+value+`"}}`), metav1.PatchOptions{FieldManager: wgManager})
		mustf(t, err, "%s", what)
		verbs := gadgetVerbsAudited(t, start, f.ns, "g", "patch", what)
		slices.Sort(verbs)
		want := slices.Clone(wantVerbs)
		slices.Sort(want)
		if !slices.Equal(verbs, want) {
			t.Errorf("%s: kube-apiserver saw %v of Gadget g, want %v", what, verbs, want)
		}
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "DriftUnapproved")
		wgExpectField(t, d, "confirmed", true)
	}
	patchValue("the first drift by patch after a change the proxy did not see reads g live", "p", []string{"get", "dry-run patch", "patch"})
	patchValue("the next drift by patch is dry-run pinned to the proxy's copy of the answer", "q", []string{"dry-run patch", "patch"})
	if got := f.gadgetValue("g"); got != "q" {
		t.Fatalf("spec.value %q after the patches, want q", got)
	}
}

// gadgetVerbsAudited waits until kube-apiserver's audit log shows verb on
// Gadget name in ns since start, and returns the verbs of every request
// of that Gadget that reached kube-apiserver since start, a dry run
// named "dry-run <verb>".
func gadgetVerbsAudited(t *testing.T, start time.Time, ns, name, verb, what string) []string {
	t.Helper()
	var verbs []string
	eventually(t, time.Minute, what+" is audited", func() error {
		seen := auditedSince(t, start, func(e auditv1.Event) bool {
			return e.Stage == auditv1.StageResponseComplete && e.ObjectRef != nil &&
				e.ObjectRef.Resource == framework.GadgetGVR.Resource && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == name
		})
		verbs = verbs[:0]
		for _, e := range seen {
			v := e.Verb
			if strings.Contains(e.RequestURI, "dryRun=All") {
				v = "dry-run " + v
			}
			verbs = append(verbs, v)
		}
		if !slices.Contains(verbs, verb) {
			return fmt.Errorf("no %s yet:%s", verb, describeEvents(seen))
		}
		return nil
	})
	return verbs
}
