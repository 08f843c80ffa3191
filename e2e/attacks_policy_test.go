package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// Attacks by a namespace admin through ApprovalPolicies: the policies of
// its own service accounts are its to write, and the proxy evaluates them
// on the write path.

var approvalPoliciesGVR = schema.GroupVersionResource{Group: "kausality.io", Version: "v1alpha1", Resource: "approvalpolicies"}

// policyCPUBound is how much CPU the whole proxy process may spend across
// one write whose policies run out of the write's evaluation budget. The
// budget (kube-apiserver's match-condition budget, 2.5M CEL cost units)
// is meant as about a quarter second; the expressions below spend about
// three times that per cost unit here, and a shared 2-core machine is
// slower still, so the bound is generous. The same write without a budget
// spends tens of seconds.
const policyCPUBound = 5 * time.Second

// namespaceAdmin is a user who administers ns: the built-in admin role,
// and ApprovalPolicies there, as a cluster that aggregates them to admin
// grants.
func namespaceAdmin(t *testing.T, ns string) dynamic.Interface {
	t.Helper()
	ctx := context.Background()
	user := "nsadmin-" + utilrand.String(5)
	admin := directClient(t)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "approvalpolicies", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"kausality.io"}, Resources: []string{"approvalpolicies"}, Verbs: []string{"*"}}},
	}
	_, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		mustf(t, err, "the approvalpolicies role in %s", ns)
	}
	for name, ref := range map[string]rbacv1.RoleRef{
		user + "-admin":    {APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"},
		user + "-policies": {APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
	} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, RoleRef: ref,
			Subjects: []rbacv1.Subject{{Kind: "User", Name: user}}}
		_, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})
		mustf(t, err, "binding %s in %s", name, ns)
		t.Cleanup(func() { _ = admin.RbacV1().RoleBindings(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	waitMayCreate(t, user, "kausality.io", "approvalpolicies", ns)
	cfg, err := cluster.UserThroughProxy(user)
	mustf(t, err, "namespace admin %s", user)
	dyn, err := dynamic.NewForConfig(cfg)
	mustf(t, err, "client for %s", user)
	return dyn
}

// waitMayCreate waits until kube-apiserver lets user create resource of
// group in ns.
func waitMayCreate(t *testing.T, user, group, resource, ns string) {
	t.Helper()
	eventually(t, 30*time.Second, user+" may create "+resource+" in "+ns, func() error {
		sar, err := directClient(t).AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: group, Resource: resource, Namespace: ns}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("not yet allowed: %s", sar.Status.Reason)
		}
		return nil
	})
}

// putApprovalPolicy creates or replaces ApprovalPolicy ns/name with rules,
// as the namespace admin, and returns its generation.
func putApprovalPolicy(t *testing.T, as dynamic.Interface, ns, name string, rules []any) int64 {
	t.Helper()
	ctx := context.Background()
	ri := as.Resource(approvalPoliciesGVR).Namespace(ns)
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kausality.io/v1alpha1", "kind": "ApprovalPolicy",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"rules": rules},
	}}
	got, err := ri.Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := ri.Get(ctx, name, metav1.GetOptions{})
		mustf(t, gerr, "get ApprovalPolicy %s/%s", ns, name)
		cur.Object["spec"] = p.Object["spec"]
		got, err = ri.Update(ctx, cur, metav1.UpdateOptions{})
	}
	mustf(t, err, "the namespace admin writes ApprovalPolicy %s/%s", ns, name)
	t.Cleanup(func() { _ = ri.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return got.GetGeneration()
}

// approvalPolicyReady waits until the proxy reports a Ready condition on
// generation gen of ApprovalPolicy ns/name that satisfies ok, and returns
// it.
func approvalPolicyReady(t *testing.T, ns, name string, gen int64, what string, ok func(status, reason, message string) bool) map[string]any {
	t.Helper()
	admin, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "admin dynamic client")
	var cond map[string]any
	eventually(t, 60*time.Second, "the proxy reports "+what+" on ApprovalPolicy "+ns+"/"+name, func() error {
		p, err := admin.Resource(approvalPoliciesGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			og, _ := m["observedGeneration"].(int64)
			if m["type"] != "Ready" || og != gen {
				continue
			}
			status, _ := m["status"].(string)
			reason, _ := m["reason"].(string)
			message, _ := m["message"].(string)
			if !ok(status, reason, message) {
				return fmt.Errorf("condition %v", m)
			}
			cond = m
			return nil
		}
		return fmt.Errorf("no Ready condition for generation %d in %v", gen, p.Object["status"])
	})
	return cond
}

// processCPU is the CPU time the test process, the proxy included, has
// used.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	mustf(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru), "getrusage")
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// celInts is a CEL list literal of 0..n-1.
func celInts(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// TestAttackApprovalPolicyBurnsProxyCPU: a namespace admin writes, for its
// own service account, an ApprovalPolicy of 50 rules that each cost nearly
// the per-expression limit, then one with a long regular expression, and
// the service account writes a Gadget under a Widget it does not control
// (a new origin, which newOrigins rules are evaluated for). Each write is
// answered within its deadline, and the CPU the proxy spends on it is
// bounded by the write's budget; the policy's status says what stopped
// it.
func TestAttackApprovalPolicyBurnsProxyCPU(t *testing.T) {
	f := newWGFamily(t, "teama", "")
	f.initialize()
	nsAdmin := namespaceAdmin(t, f.ns)

	const sa = "worker"
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets", Namespace: f.ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{framework.TestGroup}, Resources: []string{"gadgets"}, Verbs: []string{"*"}}},
	}
	_, err := directClient(t).RbacV1().Roles(f.ns).Create(context.Background(), role, metav1.CreateOptions{})
	mustf(t, err, "the gadgets role")
	_, err = directClient(t).RbacV1().RoleBindings(f.ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-gadgets", Namespace: f.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: f.ns, Name: sa}},
	}, metav1.CreateOptions{})
	mustf(t, err, "the worker's binding")
	cfg, err := cluster.ServiceAccountThroughProxy(context.Background(), f.ns, sa)
	mustf(t, err, "the worker's token")
	worker := wgNewActor(t, cfg, "system:serviceaccount:"+f.ns+":"+sa)
	waitMayCreate(t, worker.user, framework.TestGroup, "gadgets", f.ns)

	// writeGadget creates a Gadget with value under the Widget, as the
	// worker, with a deadline, and returns the proxy process's CPU spent
	// across the write.
	writeGadget := func(name, value string) time.Duration {
		t.Helper()
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wgAPIVersion, "kind": "Gadget",
			"metadata": map[string]any{"name": name, "namespace": f.ns},
			"spec":     map[string]any{"value": value},
		}}
		ref := f.ownerRef()
		ref.BlockOwnerDeletion = nil
		g.SetOwnerReferences([]metav1.OwnerReference{ref})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		worker.warnings.take()
		before := processCPU(t)
		_, err := f.gadgets(worker).Create(ctx, g, metav1.CreateOptions{})
		spent := processCPU(t) - before
		mustf(t, err, "the worker's write of Gadget %s, answered within its deadline", name)
		t.Logf("the proxy process spent %v of CPU across the write of Gadget %s", spent, name)
		return spent
	}

	t.Run("fifty costly CEL rules", func(t *testing.T) {
		// 44³ iterations that find nothing: estimated, and spent, a little
		// under the per-expression limit; the rule never matches.
		costly := "!(" + celInts(44) + ".all(i, " + celInts(44) + ".all(j, " + celInts(44) + ".exists(k, i + j + k < 0) == false)))"
		rules := make([]any, 50)
		for i := range rules {
			rules[i] = map[string]any{"apiVersion": wgAPIVersion, "kind": "Gadget", "mode": "always", "newOrigins": true,
				"match": map[string]any{"cel": costly}}
		}
		gen := putApprovalPolicy(t, nsAdmin, f.ns, sa, rules)
		approvalPolicyReady(t, f.ns, sa, gen, "Ready=True", func(status, _, _ string) bool { return status == "True" })

		mark := wgMark(t)
		spent := writeGadget("cel", "v1")
		if spent > policyCPUBound {
			t.Errorf("the proxy spent %v of CPU on one write, more than %v", spent, policyCPUBound)
		}
		d := wgDecision(t, mark, "gadgets", f.ns, "cel")
		wgExpectDecision(t, d, "Allow", "NewOrigin")
		policy := "ApprovalPolicy " + f.ns + "/" + sa
		if !wgSomeContainsAll(worker.warnings.take(), policy, "budget") {
			t.Errorf("the write was not warned that %s ran out of the budget", policy)
		}
		cond := approvalPolicyReady(t, f.ns, sa, gen, "Ready=False (BudgetExceeded)", func(status, reason, _ string) bool {
			return status == "False" && reason == "BudgetExceeded"
		})
		t.Logf("status: %v", cond["message"])
	})

	t.Run("long regular expressions", func(t *testing.T) {
		// 361 bytes that compile to some 80,000 instructions, and 4 bytes
		// that compile to 4,000, against 20 kB of desired state: RE2 is
		// linear, in the input times the program.
		long := strings.Repeat(`.{0,1000}`, 40) + "x"
		rules := []any{
			map[string]any{"apiVersion": wgAPIVersion, "kind": "Gadget", "mode": "always", "newOrigins": true, "match": map[string]any{"regexp": long}},
			map[string]any{"apiVersion": wgAPIVersion, "kind": "Gadget", "mode": "always", "newOrigins": true, "match": map[string]any{"regexp": `.{0,1000}.{0,1000}x`}},
		}
		gen := putApprovalPolicy(t, nsAdmin, f.ns, sa, rules)
		approvalPolicyReady(t, f.ns, sa, gen, "a Ready condition", func(string, string, string) bool { return true })

		spent := writeGadget("re", strings.Repeat("a", 20_000))
		if spent > policyCPUBound {
			t.Errorf("the proxy spent %v of CPU on one write, more than %v", spent, policyCPUBound)
		}
		cond := approvalPolicyReady(t, f.ns, sa, gen, "Ready=False naming both rules", func(status, _, message string) bool {
			return status == "False" && strings.Contains(message, "rule 0: match.regexp: the pattern compiles to") &&
				strings.Contains(message, "rule 1: match.regexp: matching")
		})
		t.Logf("status: %v", cond["message"])
	})
}

// TestAttackNamespacedPolicyApprovesElsewhere: the admin of the namespace
// a controller runs in writes an ApprovalPolicy for the controller's
// service account whose rule leaves the namespace open ("*", the
// default), then one that names another namespace. Neither approves the
// controller's drift in an enforced namespace the admin has no rights in,
// and the status says that the policy governs its own namespace only.
func TestAttackNamespacedPolicyApprovesElsewhere(t *testing.T) {
	enf := polFamily(t, "enf", map[string]string{"dev": "dev"})
	enf.settleGadget("dev", "Deny/DriftUnapproved")
	nsAdmin := namespaceAdmin(t, wgControllerNS)

	for _, tc := range []struct {
		name      string
		namespace string
		ready     func(status, reason, message string) bool
	}{
		{"every namespace", "*", func(status, _, message string) bool {
			return status == "True" && strings.Contains(message, "in namespace "+wgControllerNS+" only")
		}},
		{"the other namespace by name", enf.ns, func(status, reason, message string) bool {
			return status == "False" && reason == "OutsideNamespace" && strings.Contains(message, `namespace "`+enf.ns+`" is outside`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gen := putApprovalPolicy(t, nsAdmin, wgControllerNS, wgControllerSA, []any{map[string]any{
				"apiVersion": wgAPIVersion, "kind": "Gadget", "namespace": tc.namespace, "name": "*", "mode": "always",
			}})
			approvalPolicyReady(t, wgControllerNS, wgControllerSA, gen, "a Ready condition", func(string, string, string) bool { return true })

			mark := wgMark(t)
			_, err := enf.setValue("dev", "v7-"+utilrand.String(4), false)
			wgDenied(t, err, enf, "Gadget", "dev", wgAnnApprovals)
			d := wgDecision(t, mark, "gadgets", enf.ns, "dev")
			wgExpectDecision(t, d, "Deny", "DriftUnapproved")
			wgExpectField(t, d, "policy", "none")
			if enf.gadgetValue("dev") != "v1" {
				t.Fatalf("the denied write changed the Gadget: %q", enf.gadgetValue("dev"))
			}
			approvalPolicyReady(t, wgControllerNS, wgControllerSA, gen, "its scope", tc.ready)
		})
	}
}

// TestPolicyWithinBudgetApprovesConfirmedDrift: a drift verdict made from
// the cache is confirmed with a live read and a dry run, and the write is
// matched again on what kube-apiserver would store. A policy that costs
// most of a write's budget still approves: each write is matched within
// its own budget, and the request's budget covers both.
func TestPolicyWithinBudgetApprovesConfirmedDrift(t *testing.T) {
	f := polFamily(t, "pol-once", map[string]string{"dev": "dev"})
	costly := celInts(44) + ".all(i, " + celInts(44) + ".all(j, " + celInts(44) + ".exists(k, i + j + k < 0) == false))"
	rule := func(cel string) map[string]any {
		return map[string]any{"apiVersion": wgAPIVersion, "kind": "Gadget", "namespace": f.ns, "name": "dev", "mode": "always",
			"match": map[string]any{"cel": cel}}
	}
	setPolicy(t, f, rule("!("+costly+")"), rule(costly))
	f.settleGadget("dev", "Allow/DriftApprovedByPolicy")

	mark := wgMark(t)
	_, err := f.setValue("dev", "v8", false)
	mustf(t, err, "the controller's drift, approved by the policy")
	d := wgDecision(t, mark, "gadgets", f.ns, "dev")
	wgExpectDecision(t, d, "Allow", "DriftApprovedByPolicy")
	wgExpectField(t, d, "policy", polName+" rule 1")
}
