package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// The intent scenarios run kube-controller-manager's own controllers
// through the proxy in enforce namespaces. Every controller there writes
// with the field manager kube-controller-manager, so only the
// authenticated user tells them apart.
const (
	intentManager      = "kube-controller-manager"
	intentRSController = "system:serviceaccount:kube-system:replicaset-controller"
	intentSSController = "system:serviceaccount:kube-system:statefulset-controller"
	intentAnnApprovals = "kausality.io/approvals"
	intentAnnFreeze    = "kausality.io/freeze"
	intentAnnCtrls     = "kausality.io/controllers"
)

// A person's edit of a settled Deployment's ReplicaSet is held: the
// deployment controller's revert is denied. The 403 carries the approval
// to set on the Deployment; set literally, it admits that one revert and is
// gone afterwards, and the next edit is held again. An approval for
// something else and a concurrent person's edit of the Deployment survive
// the proxy's consumption of the once approval.
func TestIntentApprovalOnDeployment(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "intent-appr", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	bob := intentPerson(t, "bob")
	ctrl := intentServiceAccount(t, "deployment-controller")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)

	mark := wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 3)
	intentHeld(t, alice, ns, rsName, mark, 3, 3*time.Second)

	// The controller itself got the 403; the same write as the same
	// identity gets the same answer, which is what an operator reads.
	deploy, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	s := wgStatus(t, intentSetReplicas(ctrl, ns, rsName, 2, intentManager), 403, "the deployment controller's revert, replayed")
	unblock := intentUnblock(t, s, intentAnnApprovals)
	sugg := wgApprovals(t, unblock.Message)
	if len(sugg) != 1 || sugg[0]["apiVersion"] != "apps/v1" || sugg[0]["kind"] != "ReplicaSet" || sugg[0]["name"] != rsName || sugg[0]["mode"] != "once" {
		t.Fatalf("the suggested approvals %s are not one once approval of ReplicaSet %s", unblock.Message, rsName)
	}
	t.Logf("Deployment at generation %d; suggested %s", deploy.Generation, unblock.Message)
	intentExpectReplicas(t, alice, ns, rsName, 3, "after the replayed revert was denied")

	mark = wgMark(t)
	intentAnnotate(t, bob, "Deployment", ns, "web", intentAnnApprovals, &unblock.Message)
	intentWaitReplicas(t, alice, ns, rsName, 2, "the approved revert")
	eventually(t, 15*time.Second, "the approved revert's decision line", func() error {
		if countDecisions(intentLinesAfter(t, mark, "replicasets", ns, rsName), deploymentController, "Allow", "DriftApproved") == 0 {
			return fmt.Errorf("no Allow/DriftApproved line; lines: %s", intentDescribe(intentLinesAfter(t, mark, "replicasets", ns, rsName)))
		}
		return nil
	})
	lines := intentLinesAfter(t, mark, "replicasets", ns, rsName)
	if n := countDecisions(lines, deploymentController, "Allow", "DriftApproved"); n != 1 {
		t.Errorf("the once approval admitted %d writes, want exactly 1; lines: %s", n, intentDescribe(lines))
	}
	if n := countDecisions(lines, deploymentController, "Allow", "Expected"); n != 0 {
		t.Errorf("annotating the Deployment made %d controller writes Expected; an annotation-only generation bump is not a spec change; lines: %s", n, intentDescribe(lines))
	}
	t.Logf("the first approved revert: %s", intentDescribe(intentDecisive(lines)))
	for _, l := range lines {
		if l.Str("category") == "DriftApproved" && (l.Str("approvalMode") != "once" || l.Str("approval") != "ReplicaSet/"+rsName) {
			t.Errorf("approved by %q (%q), want the once approval of ReplicaSet/%s: %v", l.Str("approval"), l.Str("approvalMode"), rsName, l)
		}
	}
	eventually(t, 15*time.Second, "the used once approval is gone from the Deployment", func() error {
		d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v := d.Annotations[intentAnnApprovals]
		var left []map[string]any
		if v != "" {
			if err := json.Unmarshal([]byte(v), &left); err != nil {
				return fmt.Errorf("%s %q: %v", intentAnnApprovals, v, err)
			}
		}
		if len(left) != 0 {
			return fmt.Errorf("%s is still %q", intentAnnApprovals, v)
		}
		return nil
	})

	mark = wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 3)
	intentHeld(t, alice, ns, rsName, mark, 3, 15*time.Second)
	if n := countDecisions(intentLinesAfter(t, mark, "replicasets", ns, rsName), deploymentController, "Allow", "DriftApproved"); n != 0 {
		t.Fatalf("the used once approval admitted %d more writes", n)
	}

	// Two approvals at once: the once approval is used, the always
	// approval of another child must stay. Meanwhile alice keeps adding
	// approvals of her own, as a person does: read, add, write back under
	// the resourceVersion she read. Each of her writes bumps the
	// Deployment's generation but not its spec, so the once approval stays
	// valid; the proxy's rewrite of the annotation must not drop any of
	// hers.
	s = wgStatus(t, intentSetReplicas(ctrl, ns, rsName, 2, intentManager), 403, "the second revert, replayed")
	entries := wgApprovals(t, intentUnblock(t, s, intentAnnApprovals).Message)
	entries = append(entries, map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "unrelated", "mode": "always"})
	value, err := json.Marshal(entries)
	mustf(t, err, "approvals")
	mark = wgMark(t)
	intentAnnotate(t, bob, "Deployment", ns, "web", intentAnnApprovals, ptr.To(string(value)))
	const adds = 10
	addErr := make(chan error, 1)
	go func() {
		for i := 0; i < adds; i++ {
			if err := intentAddApproval(alice, ns, "web", fmt.Sprintf("alice-%d", i)); err != nil {
				addErr <- fmt.Errorf("alice's approval %d: %w", i, err)
				return
			}
			time.Sleep(30 * time.Millisecond)
		}
		addErr <- nil
	}()
	intentWaitReplicas(t, alice, ns, rsName, 2, "the revert approved next to an always approval")
	mustf(t, <-addErr, "alice adds approvals")
	eventually(t, 15*time.Second, "the always approval and alice's approvals survive; the once approval is used", func() error {
		d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v := d.Annotations[intentAnnApprovals]
		var got []map[string]any
		if err := json.Unmarshal([]byte(v), &got); err != nil {
			return fmt.Errorf("%s %q: %v", intentAnnApprovals, v, err)
		}
		names := map[string]int{}
		for _, a := range got {
			names[fmt.Sprint(a["name"])]++
		}
		want := map[string]int{"unrelated": 1}
		for i := 0; i < adds; i++ {
			want[fmt.Sprintf("alice-%d", i)] = 1
		}
		if fmt.Sprint(names) != fmt.Sprint(want) {
			return fmt.Errorf("%s = %s, want the always approval of unrelated and alice-0..%d, and none for %s", intentAnnApprovals, v, adds-1, rsName)
		}
		return nil
	})
	lines = intentLinesAfter(t, mark, "replicasets", ns, rsName)
	if n := countDecisions(lines, deploymentController, "Allow", "DriftApproved"); n != 1 {
		t.Errorf("%d approved writes, want 1; lines: %s", n, intentDescribe(lines))
	}
	t.Logf("the second approved revert: %s", intentDescribe(intentDecisive(lines)))
}

// intentAddApproval adds a once approval of ReplicaSet child at the
// Deployment's current generation, as a person's read-modify-write.
func intentAddApproval(c kubernetes.Interface, ns, name, child string) error {
	ctx := context.Background()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var list []map[string]any
		if v := d.Annotations[intentAnnApprovals]; v != "" {
			if err := json.Unmarshal([]byte(v), &list); err != nil {
				return err
			}
		}
		list = append(list, map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": child, "generation": d.Generation, "mode": "once"})
		b, err := json.Marshal(list)
		if err != nil {
			return err
		}
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[intentAnnApprovals] = string(b)
		_, err = c.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
}

// A freeze on a StatefulSet holds every write to its Pods: a person's
// delete and the controller's create after a scale-up, and it holds on a
// StatefulSet that was frozen from its creation, before it ever
// initialized. Lifting it lets the scale-up proceed.
func TestIntentFreezeOnStatefulSet(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "intent-freeze", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	bob := intentPerson(t, "bob")
	admin := directClient(t)
	_, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"}},
	}, metav1.CreateOptions{})
	mustf(t, err, "headless service")

	cold := intentStatefulSet("cold", 1)
	cold.Annotations = map[string]string{intentAnnFreeze: "true"}
	_, err = bob.AppsV1().StatefulSets(ns).Create(ctx, cold, metav1.CreateOptions{})
	mustf(t, err, "bob creates a frozen StatefulSet")
	_, err = alice.AppsV1().StatefulSets(ns).Create(ctx, intentStatefulSet("db", 3), metav1.CreateOptions{})
	mustf(t, err, "alice creates StatefulSet db")
	intentSettledStatefulSet(t, alice, ns, "db", 3)

	// Its first write is its ControllerRevision (or, with one present, the
	// Pod): whichever, it is denied.
	eventually(t, 30*time.Second, "the controller's writes under the StatefulSet frozen at creation are denied as Frozen", func() error {
		all, err := cluster.Decisions()
		if err != nil {
			return err
		}
		var under []framework.DecisionLine
		for _, l := range all {
			if l.Str("namespace") == ns && l.Str("parent") == "apps/v1 StatefulSet "+ns+"/cold" {
				under = append(under, l)
			}
		}
		if countDecisions(under, intentSSController, "Deny", "Frozen") == 0 {
			return fmt.Errorf("no Deny/Frozen line under StatefulSet cold; lines: %s", intentDescribe(under))
		}
		for _, l := range under {
			if l.Str("decision") == "Allow" && l.Bool("desiredChanged") {
				return fmt.Errorf("a write under the frozen StatefulSet cold was allowed: %s", intentDescribe([]framework.DecisionLine{l}))
			}
		}
		t.Logf("under the StatefulSet frozen at creation: %s", intentDescribe(under))
		return nil
	})
	intentNoPods(t, admin, ns, "app=cold", "the StatefulSet frozen at creation")

	freeze := `{"user":"alice","message":"intent e2e incident"}`
	intentAnnotate(t, alice, "StatefulSet", ns, "db", intentAnnFreeze, &freeze)

	mark := wgMark(t)
	err = bob.CoreV1().Pods(ns).Delete(ctx, "db-0", metav1.DeleteOptions{})
	s := wgStatus(t, err, 403, "bob deletes a Pod of the frozen StatefulSet")
	if !strings.Contains(s.Message, "frozen by alice") || !strings.Contains(s.Message, "intent e2e incident") || !strings.Contains(s.Message, intentAnnFreeze) {
		t.Errorf("the denial does not name the freeze, who set it and why: %s", s.Message)
	}
	if c, ok := wgCause(s, "KausalityFrozen"); !ok || c.Field != "metadata.annotations["+intentAnnFreeze+"]" {
		t.Errorf("no KausalityFrozen cause on %s: %+v", intentAnnFreeze, s.Details)
	}
	intentUnblock(t, s, intentAnnFreeze)
	d := wgDecisionBy(t, mark, "bob", "pods", ns, "db-0")
	t.Logf("bob's delete: %s", intentDescribe([]framework.DecisionLine{d}))
	if d.Str("user") != "bob" || d.Str("decision") != "Deny" || d.Str("category") != "Frozen" {
		t.Errorf("bob's delete: want Deny/Frozen")
	}
	p, err := admin.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
	mustf(t, err, "db-0 must still exist")
	if p.DeletionTimestamp != nil {
		t.Fatal("the denied delete went through: db-0 is terminating")
	}

	mark = wgMark(t)
	_, err = bob.AppsV1().StatefulSets(ns).UpdateScale(ctx, "db",
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 4}}, metav1.UpdateOptions{})
	mustf(t, err, "bob scales the frozen StatefulSet itself (it has no parent)")
	eventually(t, 60*time.Second, "the controller's create of db-3 is denied as Frozen", func() error {
		lines := intentLinesAfter(t, mark, "pods", ns, "db-3")
		if countDecisions(lines, intentSSController, "Deny", "Frozen") == 0 {
			return fmt.Errorf("no Deny/Frozen line for db-3; lines: %s", intentDescribe(lines))
		}
		return nil
	})
	for i := 0; i < 3; i++ {
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, "db-3", metav1.GetOptions{}); err == nil {
			t.Fatalf("db-3 was created while db is frozen; lines: %s", intentDescribe(intentLinesAfter(t, mark, "pods", ns, "db-3")))
		}
		time.Sleep(time.Second)
	}
	t.Logf("db-3 while frozen: %s", intentDescribe(intentLinesAfter(t, mark, "pods", ns, "db-3")))
	for _, l := range intentLinesAfter(t, mark, "pods", ns, "db-3") {
		if l.Str("decision") == "Allow" {
			t.Fatalf("a write of db-3 was allowed while frozen: %s", intentDescribe([]framework.DecisionLine{l}))
		}
	}

	mark = wgMark(t)
	intentAnnotate(t, alice, "StatefulSet", ns, "db", intentAnnFreeze, nil)
	intentSettledStatefulSet(t, alice, ns, "db", 4)
	eventually(t, 15*time.Second, "the create of db-3 after the freeze is lifted is Expected", func() error {
		lines := intentLinesAfter(t, mark, "pods", ns, "db-3")
		if countDecisions(lines, intentSSController, "Allow", "Expected") == 0 {
			return fmt.Errorf("no Allow/Expected line for db-3; lines: %s", intentDescribe(lines))
		}
		t.Logf("db-3 after the freeze is lifted: %s", intentDescribe(lines))
		return nil
	})
}

// Who is the controller is decided by the authenticated user that advances
// the parent's observedGeneration, not by the field manager string:
// kube-controller-manager's controllers all share one.
func TestIntentControllerIdentity(t *testing.T) {
	ns := namespaceWithMode(t, "intent-id", "enforce")
	alice := intentPerson(t, "alice")
	bob := intentPerson(t, "bob")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 0, true)

	mark := wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 1)
	intentHeld(t, alice, ns, rsName, mark, 1, 2*time.Second)

	// Each step sets a value the ReplicaSet does not have yet, so each is a
	// desired-state change whatever the previous step's outcome was.
	t.Run("the controller under another field manager is still the controller", func(t *testing.T) {
		ctrl := intentServiceAccount(t, "deployment-controller")
		mark := wgMark(t)
		s := wgStatus(t, intentSetReplicas(ctrl, ns, rsName, 0, "renamed-manager"), 403, "the deployment controller's revert as renamed-manager")
		if _, ok := wgCause(s, "KausalityUnapproved"); !ok {
			t.Errorf("the denial is not for unapproved drift: %s", s.Message)
		}
		d := intentLine(t, mark, rsName, ns, deploymentController, "renamed-manager")
		intentExpect(t, d, "Deny", "DriftUnapproved", true)
		intentExpectReplicas(t, alice, ns, rsName, 1, "after the denied revert")
	})

	t.Run("another controller with the same field manager is a new origin", func(t *testing.T) {
		rsCtrl := intentServiceAccount(t, "replicaset-controller")
		mark := wgMark(t)
		mustf(t, intentSetReplicas(rsCtrl, ns, rsName, 2, intentManager), "the replicaset controller's identity scales the Deployment's ReplicaSet")
		d := intentLine(t, mark, rsName, ns, intentRSController, intentManager)
		intentExpect(t, d, "Allow", "NewOrigin", false)
		intentExpectReplicas(t, alice, ns, rsName, 2, "after the replicaset controller's edit")
	})

	t.Run("a person with the controller's field manager is a new origin", func(t *testing.T) {
		mark := wgMark(t)
		mustf(t, intentSetReplicas(bob, ns, rsName, 3, intentManager), "bob scales the ReplicaSet as kube-controller-manager")
		d := intentLine(t, mark, rsName, ns, "bob", intentManager)
		intentExpect(t, d, "Allow", "NewOrigin", false)
		intentExpectReplicas(t, alice, ns, rsName, 3, "after bob's edit")
	})
}

// A Deployment a person creates starts a causal chain; its first
// ReplicaSet continues it.
func TestIntentTraceOfNewDeployment(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "intent-trace", "enforce")
	bob := intentPerson(t, "bob")
	_, err := bob.AppsV1().Deployments(ns).Create(ctx, testDeployment("traced", 1), metav1.CreateOptions{})
	mustf(t, err, "bob creates a Deployment")
	admin := directClient(t)
	d, err := admin.AppsV1().Deployments(ns).Get(ctx, "traced", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	if hops := traceOf(t, d); len(hops) != 1 || hops[0].Kind != "Deployment" || hops[0].Name != "traced" || hops[0].User != "bob" {
		t.Errorf("the new Deployment's trace is %+v, want one origin hop Deployment traced by bob", hops)
	}
	rs := onlyReplicaSet(t, admin, ns)
	hops := traceOf(t, rs)
	if len(hops) < 2 {
		t.Fatalf("the first ReplicaSet %s has trace %s, want 2 or more hops; lines: %s", rs.Name, rs.Annotations[annTrace],
			intentDescribe(decisionsFor(t, "replicasets", ns, rs.Name)))
	}
	if hops[0].Kind != "Deployment" || hops[0].Name != "traced" || hops[0].APIVersion != "apps/v1" || hops[0].User != "bob" {
		t.Errorf("the first hop is %+v, want bob's Deployment traced", hops[0])
	}
	if last := hops[len(hops)-1]; last.Kind != "ReplicaSet" || last.Name != rs.Name || last.User != deploymentController {
		t.Errorf("the last hop is %+v, want ReplicaSet %s by %s", last, rs.Name, deploymentController)
	}
	eventually(t, 15*time.Second, "the ReplicaSet create's decision line counts the hops", func() error {
		for _, l := range decisionsFor(t, "replicasets", ns, rs.Name) {
			if n, _ := l["traceHops"].(float64); l.Str("operation") == "CREATE" && n >= 2 {
				return nil
			}
		}
		return fmt.Errorf("no create line with traceHops >= 2: %s", intentDescribe(decisionsFor(t, "replicasets", ns, rs.Name)))
	})
}

func intentPerson(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := cluster.UserThroughProxy(name, "system:masters")
	mustf(t, err, "%s", name)
	return clientFor(t, cfg)
}

// intentServiceAccount is a client with the token of one of
// kube-controller-manager's controllers, so its writes are that
// controller's as far as anyone can tell.
func intentServiceAccount(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := cluster.ServiceAccountThroughProxy(context.Background(), "kube-system", name)
	mustf(t, err, "service account %s", name)
	return clientFor(t, cfg)
}

// intentSettledDeployment creates a Deployment and waits until it is
// Current at its spec: observed, all replicas updated and available, and
// initialized by the proxy. withRecord also waits for the proxy to record
// who advanced observedGeneration.
func intentSettledDeployment(t *testing.T, c kubernetes.Interface, ns, name string, replicas int32, withRecord bool) (*appsv1.Deployment, string) {
	t.Helper()
	ctx := context.Background()
	_, err := c.AppsV1().Deployments(ns).Create(ctx, testDeployment(name, replicas), metav1.CreateOptions{})
	mustf(t, err, "creating deployment %s", name)
	var d *appsv1.Deployment
	eventually(t, 90*time.Second, "deployment "+name+" settled", func() error {
		d, err = c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := d.Status
		available := false
		for _, c := range st.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
				available = true
			}
		}
		if !available || st.ObservedGeneration != d.Generation || st.Replicas != replicas || st.UpdatedReplicas != replicas ||
			st.AvailableReplicas != replicas || st.ReadyReplicas != replicas {
			return fmt.Errorf("available=%v generation=%d status=%+v", available, d.Generation, st)
		}
		if d.Annotations[annPhase] != "initialized" {
			return fmt.Errorf("%s = %q", annPhase, d.Annotations[annPhase])
		}
		if withRecord && d.Annotations[intentAnnCtrls] == "" {
			return fmt.Errorf("the proxy has not recorded the deployment controller in %s", intentAnnCtrls)
		}
		return nil
	})
	return d, onlyReplicaSet(t, c, ns).Name
}

func intentStatefulSet(name string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         "db",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.invalid/db:1"}}},
			},
		},
	}
}

func intentSettledStatefulSet(t *testing.T, c kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("statefulset %s settled at %d replicas", name, replicas), func() error {
		s, err := c.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := s.Status
		if st.ObservedGeneration != s.Generation || st.Replicas != replicas || st.ReadyReplicas != replicas ||
			st.AvailableReplicas != replicas || st.UpdatedReplicas != replicas || st.CurrentRevision != st.UpdateRevision {
			return fmt.Errorf("generation=%d status=%+v", s.Generation, st)
		}
		if s.Annotations[annPhase] != "initialized" {
			return fmt.Errorf("%s = %q", annPhase, s.Annotations[annPhase])
		}
		return nil
	})
}

func intentScaleRS(t *testing.T, c kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	_, err := c.AppsV1().ReplicaSets(ns).UpdateScale(context.Background(), name,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}, metav1.UpdateOptions{})
	mustf(t, err, "a person scales ReplicaSet %s to %d (a new origin must be allowed)", name, replicas)
}

// intentSetReplicas writes spec.replicas of a ReplicaSet the way the
// deployment controller does: a full update (which the replicaset
// controller's role also allows, unlike patch and scale).
func intentSetReplicas(c kubernetes.Interface, ns, name string, replicas int32, fieldManager string) error {
	ctx := context.Background()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rs, err := c.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rs.Spec.Replicas = ptr.To(replicas)
		_, err = c.AppsV1().ReplicaSets(ns).Update(ctx, rs, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
}

// intentAnnotate sets (or with nil removes) one annotation of a
// Deployment or a StatefulSet with a merge patch.
func intentAnnotate(t *testing.T, c kubernetes.Interface, kind, ns, name, key string, value *string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	mustf(t, err, "patch")
	ctx := context.Background()
	switch kind {
	case "Deployment":
		_, err = c.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	case "StatefulSet":
		_, err = c.AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	default:
		t.Fatalf("intentAnnotate: kind %s", kind)
	}
	mustf(t, err, "annotating %s %s: %s", kind, name, patch)
}

// intentHeld waits for the deployment controller's revert of a person's
// edit to be denied as drift, then checks for hold that the edit stays.
func intentHeld(t *testing.T, c kubernetes.Interface, ns, rsName string, mark int, replicas int32, hold time.Duration) {
	t.Helper()
	eventually(t, 60*time.Second, "the deployment controller's revert is denied as drift", func() error {
		lines := intentLinesAfter(t, mark, "replicasets", ns, rsName)
		if countDecisions(lines, deploymentController, "Deny", "DriftUnapproved") == 0 {
			return fmt.Errorf("no Deny/DriftUnapproved line for the controller; lines: %s", intentDescribe(lines))
		}
		return nil
	})
	for end := time.Now().Add(hold); ; {
		intentExpectReplicas(t, c, ns, rsName, replicas, "while the edit is held")
		if time.Now().After(end) {
			break
		}
		time.Sleep(time.Second)
	}
	lines := intentLinesAfter(t, mark, "replicasets", ns, rsName)
	for _, l := range lines {
		if l.Str("user") == deploymentController && l.Str("decision") == "Allow" && l.Bool("desiredChanged") {
			t.Fatalf("a controller write changing the ReplicaSet was allowed while the edit should be held: %s", intentDescribe(lines))
		}
	}
}

func intentExpectReplicas(t *testing.T, c kubernetes.Interface, ns, name string, want int32, when string) {
	t.Helper()
	rs, err := c.AppsV1().ReplicaSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	mustf(t, err, "get ReplicaSet %s", name)
	if *rs.Spec.Replicas != want {
		t.Fatalf("%s: ReplicaSet %s has %d replicas, want %d; lines: %s", when, name, *rs.Spec.Replicas, want,
			intentDescribe(decisionsFor(t, "replicasets", ns, name)))
	}
}

func intentWaitReplicas(t *testing.T, c kubernetes.Interface, ns, name string, want int32, what string) {
	t.Helper()
	eventually(t, 60*time.Second, what, func() error {
		rs, err := c.AppsV1().ReplicaSets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *rs.Spec.Replicas != want {
			return fmt.Errorf("ReplicaSet %s has %d replicas, want %d; lines: %s", name, *rs.Spec.Replicas, want,
				intentDescribe(decisionsFor(t, "replicasets", ns, name)))
		}
		return nil
	})
}

func intentNoPods(t *testing.T, c kubernetes.Interface, ns, selector, what string) {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	mustf(t, err, "list pods")
	if len(pods.Items) != 0 {
		t.Fatalf("%s has %d pods", what, len(pods.Items))
	}
}

// intentUnblock returns the cause that says how to unblock, which must
// name the parent annotation key.
func intentUnblock(t *testing.T, s metav1.Status, key string) metav1.StatusCause {
	t.Helper()
	c, ok := wgCause(s, "KausalityUnblock")
	if !ok {
		t.Fatalf("the denial has no KausalityUnblock cause: %s; %+v", s.Message, s.Details)
	}
	if c.Field != "metadata.annotations["+key+"]" {
		t.Fatalf("the unblock cause names %q, want the annotation %s: %+v", c.Field, key, c)
	}
	return c
}

// intentLinesAfter returns the non-dry-run decision lines about one object
// logged after mark.
func intentLinesAfter(t *testing.T, mark int, resource, ns, name string) []framework.DecisionLine {
	t.Helper()
	return wgDecisionsAfter(t, mark, resource, ns, name)
}

// intentLine waits for the decision line of a ReplicaSet spec write by user
// with fieldManager after mark and returns the last one (a conflict retry
// logs another).
func intentLine(t *testing.T, mark int, rsName, ns, user, fieldManager string) framework.DecisionLine {
	t.Helper()
	var d framework.DecisionLine
	eventually(t, 15*time.Second, fmt.Sprintf("a decision line for %s as %s", user, fieldManager), func() error {
		lines := intentLinesAfter(t, mark, "replicasets", ns, rsName)
		for _, l := range lines {
			if l.Str("user") == user && l.Str("fieldManager") == fieldManager && l.Str("subresource") == "" {
				d = l
			}
		}
		if d == nil {
			return fmt.Errorf("none; lines: %s", intentDescribe(lines))
		}
		return nil
	})
	return d
}

// intentExpect checks decision and category, whether the writer counted as
// the parent's controller, and that the controller was identified from the
// proxy's record of who advances observedGeneration, not from managedFields.
func intentExpect(t *testing.T, d framework.DecisionLine, decision, category string, isController bool) {
	t.Helper()
	t.Logf("decision: %s", intentDescribe([]framework.DecisionLine{d}))
	if d.Str("decision") != decision || d.Str("category") != category || d.Bool("isController") != isController {
		t.Errorf("got %s, want %s/%s isController=%v", intentDescribe([]framework.DecisionLine{d}), decision, category, isController)
	}
	if m := d.Str("controllerMethod"); m == "" || m == "managedFields" || !d.Bool("controllerDetermined") {
		t.Errorf("the controller was not identified from the record (controllerMethod %q, determined %v): %s",
			m, d.Bool("controllerDetermined"), intentDescribe([]framework.DecisionLine{d}))
	}
}

// intentDecisive drops the lines that decided nothing about drift:
// metadata-only and status writes.
func intentDecisive(lines []framework.DecisionLine) []framework.DecisionLine {
	var out []framework.DecisionLine
	for _, l := range lines {
		if c := l.Str("category"); c != "NoDesiredChange" && c != "StatusWrite" {
			out = append(out, l)
		}
	}
	return out
}

func intentDescribe(lines []framework.DecisionLine) string {
	if len(lines) == 0 {
		return "(none)"
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "\n  %s %s/%s user=%s fm=%s %s/%s isController=%v method=%s parentGen=%v obsGen=%v phase=%s approval=%s reason=%q parentSource=%s changed=%v violations=%v",
			l.Str("verb"), l.Str("resource"), l.Str("name"), l.Str("user"), l.Str("fieldManager"), l.Str("decision"), l.Str("category"),
			l.Bool("isController"), l.Str("controllerMethod"), l["parentGeneration"], l["parentObservedGeneration"], l.Str("lifecyclePhase"),
			l.Str("approval"), l.Str("reason"), l.Str("parentSource"), l["changedPaths"], l["allowanceViolations"])
	}
	return b.String()
}
