package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

const (
	deploymentController = "system:serviceaccount:kube-system:deployment-controller"
	annTrace             = "kausality.io/trace"
	annPhase             = "kausality.io/phase"
)

type hop struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Name       string            `json:"name"`
	Generation int64             `json:"generation"`
	User       string            `json:"user"`
	Timestamp  string            `json:"timestamp"`
	Labels     map[string]string `json:"labels"`
}

func traceOf(t *testing.T, obj metav1.Object) []hop {
	t.Helper()
	v, ok := obj.GetAnnotations()[annTrace]
	if !ok {
		return nil
	}
	var hops []hop
	if err := json.Unmarshal([]byte(v), &hops); err != nil {
		t.Fatalf("%s of %s is not a trace: %v: %s", annTrace, obj.GetName(), err, v)
	}
	return hops
}

// namespaceWithMode creates a namespace directly, with kausality.io/mode
// set when mode is not empty.
func namespaceWithMode(t *testing.T, prefix, mode string) string {
	t.Helper()
	name := prefix + "-" + rand.String(5)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if mode != "" {
		ns.Annotations = map[string]string{"kausality.io/mode": mode}
	}
	admin := clientFor(t, cluster.Direct())
	if _, err := admin.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// stableDeployment creates a Deployment with replicas: 0 through the proxy
// as alice and waits until kube-controller-manager (through the proxy) has
// made it Available, the proxy has persisted its initialized phase and the
// controller has observed the latest generation. It returns the Deployment
// and the name of its ReplicaSet.
func stableDeployment(t *testing.T, alice kubernetes.Interface, ns, name string) (*appsv1.Deployment, string) {
	t.Helper()
	return waitStableDeployment(t, alice, ns, name, true)
}

// waitStableDeployment is stableDeployment; persisted says whether to wait
// for the proxy to persist the initialized phase (it does not when the
// deployment controller is in shadow mode: shadow changes nothing).
func waitStableDeployment(t *testing.T, alice kubernetes.Interface, ns, name string, persisted bool) (*appsv1.Deployment, string) {
	t.Helper()
	ctx := context.Background()
	_, err := alice.AppsV1().Deployments(ns).Create(ctx, testDeployment(name, 0), metav1.CreateOptions{})
	mustf(t, err, "creating deployment")
	var d *appsv1.Deployment
	eventually(t, 90*time.Second, "deployment stable and initialized", func() error {
		d, err = alice.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		available := false
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
				available = true
			}
		}
		if !available || d.Status.ObservedGeneration != d.Generation || (persisted && d.Annotations[annPhase] != "initialized") {
			return fmt.Errorf("available=%v generation=%d observed=%d phase=%q", available, d.Generation, d.Status.ObservedGeneration, d.Annotations[annPhase])
		}
		return nil
	})
	rs := onlyReplicaSet(t, alice, ns)
	return d, rs.Name
}

func onlyReplicaSet(t *testing.T, c kubernetes.Interface, ns string) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	eventually(t, 60*time.Second, "one replicaset", func() error {
		list, err := c.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d replicasets", len(list.Items))
		}
		rs = &list.Items[0]
		return nil
	})
	return rs
}

// decisionsFor returns the proxy's decision lines about one object.
func decisionsFor(t *testing.T, resource, ns, name string) []framework.DecisionLine {
	t.Helper()
	all, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	var out []framework.DecisionLine
	for _, d := range all {
		if d.Str("resource") == resource && d.Str("namespace") == ns && d.Str("name") == name {
			out = append(out, d)
		}
	}
	return out
}

func countDecisions(lines []framework.DecisionLine, user, decision, category string) int {
	n := 0
	for _, d := range lines {
		if (user == "" || d.Str("user") == user) && d.Str("decision") == decision && d.Str("category") == category {
			n++
		}
	}
	return n
}

// A spec change of the Deployment lets the deployment controller's
// ReplicaSet writes through as expected changes, and the new ReplicaSet
// carries a two-hop trace: alice's Deployment change, then the controller.
func TestExpectedChangeExtendsTrace(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "expected", "enforce")
	aliceCfg, err := cluster.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "alice")
	alice := clientFor(t, aliceCfg)
	d, _ := stableDeployment(t, alice, ns, "web")
	if hops := traceOf(t, d); len(hops) != 1 || hops[0].Kind != "Deployment" || hops[0].User != "alice" {
		t.Fatalf("the Deployment alice created should carry a one-hop origin trace, got %+v", hops)
	}

	_, err = alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"kausality.io/trace-ticket":"OPS-1"}},"spec":{"template":{"metadata":{"annotations":{"rollout":"2"}}}}}`), metav1.PatchOptions{})
	mustf(t, err, "changing the deployment spec")

	eventually(t, 90*time.Second, "new ReplicaSet with a two-hop trace", func() error {
		list, err := alice.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, rs := range list.Items {
			if rs.Spec.Template.Annotations["rollout"] != "2" {
				continue
			}
			hops := traceOf(t, &rs)
			if len(hops) != 2 {
				return fmt.Errorf("new ReplicaSet %s has trace %+v", rs.Name, hops)
			}
			if hops[0].Kind != "Deployment" || hops[0].Name != "web" || hops[0].User != "alice" || hops[0].Labels["ticket"] != "OPS-1" {
				return fmt.Errorf("first hop %+v", hops[0])
			}
			if hops[1].Kind != "ReplicaSet" || hops[1].Name != rs.Name || hops[1].User != deploymentController {
				return fmt.Errorf("second hop %+v", hops[1])
			}
			return nil
		}
		return fmt.Errorf("no ReplicaSet for the new template yet")
	})
	// The decision line of an allowed write is logged once the upstream has
	// answered, so it may land just after the ReplicaSet is visible.
	eventually(t, 15*time.Second, "an Expected decision for the deployment controller's ReplicaSet writes", func() error {
		lines, err := cluster.Decisions()
		if err != nil {
			return err
		}
		expected := 0
		for _, l := range lines {
			if l.Str("namespace") == ns && l.Str("resource") == "replicasets" && l.Str("category") == "Expected" && l.Str("user") == deploymentController {
				expected++
			}
		}
		if expected == 0 {
			return fmt.Errorf("no Expected decision for the deployment controller's ReplicaSet writes")
		}
		return nil
	})
}

// With the Deployment stable, a person scaling its ReplicaSet is a new
// causal origin and allowed; the deployment controller's revert is drift.
// In log mode the revert goes through with a warning; in enforce mode it is
// denied, and stays denied while the controller retries.
func TestDriftOnReplicaSet(t *testing.T) {
	for _, mode := range []string{"log", "enforce"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			ns := namespaceWithMode(t, "drift-"+mode, mode)
			aliceCfg, err := cluster.UserThroughProxy("alice", "system:masters")
			mustf(t, err, "alice")
			alice := clientFor(t, aliceCfg)
			_, rsName := stableDeployment(t, alice, ns, "web")

			bobCfg, err := cluster.UserThroughProxy("bob", "system:masters")
			mustf(t, err, "bob")
			bob := clientFor(t, bobCfg)
			scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: rsName, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 2}}
			_, err = bob.AppsV1().ReplicaSets(ns).UpdateScale(ctx, rsName, scale, metav1.UpdateOptions{})
			mustf(t, err, "bob scales the ReplicaSet (a new origin must be allowed)")
			if n := countDecisions(decisionsFor(t, "replicasets", ns, rsName), "bob", "Allow", "NewOrigin"); n != 1 {
				t.Fatalf("bob's scale: %d NewOrigin decisions, want 1", n)
			}

			switch mode {
			case "log":
				eventually(t, 60*time.Second, "the controller's revert goes through with a drift warning", func() error {
					rs, err := alice.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
					if err != nil {
						return err
					}
					if *rs.Spec.Replicas != 0 {
						return fmt.Errorf("replicas %d", *rs.Spec.Replicas)
					}
					if countDecisions(decisionsFor(t, "replicasets", ns, rsName), deploymentController, "Allow", "DriftUnapproved") == 0 {
						return fmt.Errorf("no allowed drift decision logged")
					}
					return nil
				})
			case "enforce":
				eventually(t, 60*time.Second, "the controller's revert is denied", func() error {
					if countDecisions(decisionsFor(t, "replicasets", ns, rsName), deploymentController, "Deny", "DriftUnapproved") == 0 {
						return fmt.Errorf("no denied drift yet")
					}
					return nil
				})
				// Kept denied: over a period, the ReplicaSet keeps bob's value
				// while the controller retries.
				for i := 0; i < 10; i++ {
					rs, err := alice.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
					mustf(t, err, "get rs")
					if *rs.Spec.Replicas != 2 {
						t.Fatalf("after %ds the drift went through: replicas %d", i, *rs.Spec.Replicas)
					}
					time.Sleep(time.Second)
				}
				if n := countDecisions(decisionsFor(t, "replicasets", ns, rsName), deploymentController, "Deny", "DriftUnapproved"); n < 2 {
					t.Fatalf("the controller's retries should be denied again and again; %d denials seen", n)
				}
				if n := countDecisions(decisionsFor(t, "replicasets", ns, rsName), deploymentController, "Allow", "DriftUnapproved"); n != 0 {
					t.Fatalf("%d drift writes were allowed in enforce mode", n)
				}
				// The drift was reported once (deduplicated across retries).
				var detected []v1alpha1.DriftReport
				eventually(t, 30*time.Second, "DriftReport Detected", func() error {
					detected = nil
					reports, err := cluster.DriftReports(ns, rsName)
					if err != nil {
						return err
					}
					for _, r := range reports {
						if r.Spec.Phase == v1alpha1.PhaseDetected {
							detected = append(detected, r)
						}
					}
					if len(detected) == 0 {
						return fmt.Errorf("no Detected report")
					}
					return nil
				})
				if len(detected) != 1 || detected[0].Spec.Parent.Kind != "Deployment" || detected[0].Spec.Parent.Name != "web" ||
					detected[0].Spec.Request.User != deploymentController || detected[0].Kind != "DriftReport" {
					t.Fatalf("Detected reports %+v", detected)
				}
				// A spec change of the parent makes the controller's revert
				// expected: allowed, and the drift is resolved under the same id.
				_, err = alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType,
					[]byte(`{"spec":{"template":{"metadata":{"labels":{"rev":"2"}}}}}`), metav1.PatchOptions{})
				mustf(t, err, "changing the deployment")
				eventually(t, 60*time.Second, "DriftReport Resolved with the Detected id", func() error {
					reports, err := cluster.DriftReports(ns, rsName)
					if err != nil {
						return err
					}
					for _, r := range reports {
						if r.Spec.Phase == v1alpha1.PhaseResolved {
							if r.Spec.ID != detected[0].Spec.ID {
								return fmt.Errorf("resolved id %s, detected id %s", r.Spec.ID, detected[0].Spec.ID)
							}
							return nil
						}
					}
					return fmt.Errorf("no Resolved report")
				})
			}
		})
	}
}
