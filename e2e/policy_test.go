package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var clusterPolicyGVR = schema.GroupVersionResource{Group: "kausality.io", Version: "v1alpha1", Resource: "clusterapprovalpolicies"}

// polName is the policy that applies to the scripted controller in the
// families' namespaces: a ClusterApprovalPolicy naming its service
// account, since an ApprovalPolicy governs its own namespace only.
const polName = "ClusterApprovalPolicy " + wgControllerSA

// polRule is a rule in the design's format for the family's Gadgets: the
// stored Gadget must be labelled env=dev, and the new one's desired state
// must be a value of the form v<digits>.
func polRule(f *wgFamily, prereq, expiry string) map[string]any {
	return map[string]any{
		"apiVersion": wgAPIVersion,
		"kind":       "Gadget",
		"namespace":  f.ns,
		"name":       "*",
		"prereqs":    map[string]any{"cel": prereq},
		"match":      map[string]any{"regexp": `{"spec":{"value":"v[0-9]+"}}`},
		"mode":       "always",
		"expiry":     expiry,
	}
}

// setPolicy creates or replaces the controller's policy and returns its
// generation.
func setPolicy(t *testing.T, f *wgFamily, rules ...map[string]any) int64 {
	t.Helper()
	ctx := context.Background()
	ri := f.admin.Resource(clusterPolicyGVR)
	list := make([]any, len(rules))
	for i, r := range rules {
		list[i] = r
	}
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kausality.io/v1alpha1", "kind": "ClusterApprovalPolicy",
		"metadata": map[string]any{"name": wgControllerSA},
		"spec": map[string]any{"rules": list,
			"serviceAccounts": []any{map[string]any{"namespace": wgControllerNS, "name": wgControllerSA}}},
	}}
	got, err := ri.Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := ri.Get(ctx, wgControllerSA, metav1.GetOptions{})
		mustf(t, gerr, "get the ClusterApprovalPolicy")
		cur.Object["spec"] = p.Object["spec"]
		got, err = ri.Update(ctx, cur, metav1.UpdateOptions{})
	}
	mustf(t, err, "set the ClusterApprovalPolicy")
	t.Cleanup(func() { _ = ri.Delete(context.Background(), wgControllerSA, metav1.DeleteOptions{}) })
	return got.GetGeneration()
}

// expectPolicyCondition waits until the proxy reports Ready with reason on
// the policy's generation, and returns the message.
func expectPolicyCondition(t *testing.T, f *wgFamily, gen int64, status, reason string) string {
	t.Helper()
	var msg string
	eventually(t, 30*time.Second, "the proxy reports Ready="+status+" ("+reason+") on the ClusterApprovalPolicy", func() error {
		p, err := f.admin.Resource(clusterPolicyGVR).Get(context.Background(), wgControllerSA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] != "Ready" {
				continue
			}
			og, _ := m["observedGeneration"].(int64)
			if m["status"] != status || m["reason"] != reason || og != gen {
				return fmt.Errorf("condition %v", m)
			}
			msg, _ = m["message"].(string)
			return nil
		}
		return fmt.Errorf("no Ready condition in %v", p.Object["status"])
	})
	return msg
}

// polFamily is an initialized Widget with Gadgets the controller created
// while it initialized, so that its writes to them now are drift; labels
// are set directly, as a person would.
func polFamily(t *testing.T, prefix string, labels map[string]string) *wgFamily {
	t.Helper()
	f := newWGFamily(t, prefix, "enforce")
	for name, env := range labels {
		_, err := f.createGadget(name, "v1", false)
		mustf(t, err, "the controller creates Gadget %s while its Widget initializes", name)
		patch := fmt.Sprintf(`{"metadata":{"labels":{"env":%q}}}`, env)
		_, err = f.admin.Resource(gadgetsGVR()).Namespace(f.ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		mustf(t, err, "label Gadget %s", name)
	}
	f.initialize()
	return f
}

func gadgetsGVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "e2e.kausality.io", Version: "v1", Resource: "gadgets"}
}

const prereqDev = "object.metadata.labels['env'] == 'dev'"

func future() string { return time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339) }

// TestPolicyApprovesDrift: a policy in the design's format lets the
// controller's drift through where its prereq holds on the stored object
// and its regexp matches the new one, and nowhere else.
func TestPolicyApprovesDrift(t *testing.T) {
	f := polFamily(t, "pol-ok", map[string]string{"dev": "dev", "prod": "prod"})
	f.settleGadget("dev", "Deny/DriftUnapproved")
	setPolicy(t, f, polRule(f, prereqDev, future()))

	f.settle("Allow/DriftApprovedByPolicy", func() error { _, err := f.setValue("dev", "v9", true); return err })
	mark := wgMark(t)
	_, err := f.setValue("dev", "v2", false)
	mustf(t, err, "the controller's drift, approved by the policy")
	d := wgDecision(t, mark, "gadgets", f.ns, "dev")
	wgExpectDecision(t, d, "Allow", "DriftApprovedByPolicy")
	wgExpectField(t, d, "policy", polName+" rule 0")
	if f.gadgetValue("dev") != "v2" {
		t.Fatalf("the approved write did not land: %q", f.gadgetValue("dev"))
	}

	// The regexp is matched against the whole desired state.
	mark = wgMark(t)
	_, err = f.setValue("dev", "not-a-version", false)
	s := wgStatus(t, err, 403, "a write the regexp does not match")
	if !strings.Contains(s.Message, "No rule of "+polName+" matched") {
		t.Errorf("the denial does not say that no policy matched: %s", s.Message)
	}
	d = wgDecision(t, mark, "gadgets", f.ns, "dev")
	wgExpectDecision(t, d, "Deny", "DriftUnapproved")
	wgExpectField(t, d, "policy", "none")

	// The prereq is false on the stored prod Gadget.
	_, err = f.setValue("prod", "v2", false)
	wgDenied(t, err, f, "Gadget", "prod", wgAnnApprovals)
	if f.gadgetValue("prod") != "v1" {
		t.Fatalf("the denied write changed the Gadget")
	}
}

// TestPolicyExpiry: an expired rule admits nothing.
func TestPolicyExpiry(t *testing.T) {
	f := polFamily(t, "pol-exp", map[string]string{"dev": "dev"})
	setPolicy(t, f, polRule(f, prereqDev, future()))
	f.settle("Allow/DriftApprovedByPolicy", func() error { _, err := f.setValue("dev", "v9", true); return err })

	setPolicy(t, f, polRule(f, prereqDev, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)))
	f.settle("Deny/DriftUnapproved", func() error { _, err := f.setValue("dev", "v9", true); return err })
	_, err := f.setValue("dev", "v3", false)
	wgDenied(t, err, f, "Gadget", "dev", wgAnnApprovals)
}

// TestPolicyRejectionWins: a rejection on the parent beats a matching
// policy, and the denial says which policy lost.
func TestPolicyRejectionWins(t *testing.T) {
	f := polFamily(t, "pol-rej", map[string]string{"dev": "dev"})
	setPolicy(t, f, polRule(f, prereqDev, future()))
	f.settle("Allow/DriftApprovedByPolicy", func() error { _, err := f.setValue("dev", "v9", true); return err })

	f.annotateWidget(map[string]*string{wgAnnRejections: ptr.To(`[{"apiVersion":"` + wgAPIVersion + `","kind":"Gadget","name":"dev","reason":"hands off"}]`)})
	f.settle("Deny/DriftRejected", func() error { _, err := f.setValue("dev", "v9", true); return err })
	mark := wgMark(t)
	_, err := f.setValue("dev", "v4", false)
	s := wgStatus(t, err, 403, "drift under a rejection")
	if !strings.Contains(s.Message, polName+" rule 0 matches this write, but a rejection wins") {
		t.Errorf("the denial does not name the policy that lost: %s", s.Message)
	}
	d := wgDecision(t, mark, "gadgets", f.ns, "dev")
	wgExpectDecision(t, d, "Deny", "DriftRejected")
	wgExpectField(t, d, "policy", polName+" rule 0")
}

// TestPolicyBrokenCEL: a policy whose CEL does not compile, or costs more
// than the limit, says so in its status and never matches.
func TestPolicyBrokenCEL(t *testing.T) {
	f := polFamily(t, "pol-bad", map[string]string{"dev": "dev"})

	gen := setPolicy(t, f, polRule(f, prereqDev, future()))
	expectPolicyCondition(t, f, gen, "True", "Compiled")

	gen = setPolicy(t, f, polRule(f, "object.metadata.labels['env'] ==", future()))
	msg := expectPolicyCondition(t, f, gen, "False", "Invalid")
	if !strings.Contains(msg, "rule 0: prereqs.cel: compilation failed") {
		t.Errorf("the condition does not say why: %s", msg)
	}
	_, err := f.setValue("dev", "v5", false)
	wgDenied(t, err, f, "Gadget", "dev", wgAnnApprovals)

	hundred := strings.TrimSuffix(strings.Repeat("1,", 100), ",")
	costly := "[" + hundred + "].map(a, [" + hundred + "].map(b, [" + hundred + "].map(c, a + b + c))).size() > 0 && " + prereqDev
	gen = setPolicy(t, f, polRule(f, costly, future()))
	msg = expectPolicyCondition(t, f, gen, "False", "CostExceeded")
	if !strings.Contains(msg, "exceeds the cost limit") {
		t.Errorf("the condition does not say why: %s", msg)
	}
	_, err = f.setValue("dev", "v6", false)
	wgDenied(t, err, f, "Gadget", "dev", wgAnnApprovals)
}
