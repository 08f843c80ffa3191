//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// TestAllowancePolicyStatus: the proxy watches AllowancePolicies and says
// in their Ready condition whether they compiled, and why not, for each
// generation.
func TestAllowancePolicyStatus(t *testing.T) {
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	policies := dyn.Resource(v1alpha1.AllowancePoliciesGVR)

	good := policyObject(t, `apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: e2e-wiring-status}
spec:
  match: {kind: Deployment, fields: [spec.replicas]}
  subjects: [{kind: User, name: alice, mayInitiate: true}]
  allow: [{kind: ReplicaSet, mutations: [spec.replicas]}]
`)
	created, err := policies.Create(ctx, good, metav1.CreateOptions{})
	mustf(t, err, "creating a valid allowance policy")
	t.Cleanup(func() { _ = policies.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
	expectAllowancePolicyCondition(t, dyn, created.GetName(), created.GetGeneration(), metav1.ConditionTrue, "Compiled")

	broken := created.DeepCopy()
	mustf(t, unstructured.SetNestedStringSlice(broken.Object, []string{"object.spec.replicas >"}, "spec", "match", "cel"), "setting CEL")
	var updated *unstructured.Unstructured
	mustf(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := policies.Get(ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		broken.SetResourceVersion(cur.GetResourceVersion())
		updated, err = policies.Update(ctx, broken, metav1.UpdateOptions{})
		return err == nil, nil
	}), "updating the policy with CEL that does not compile")
	msg := expectAllowancePolicyCondition(t, dyn, created.GetName(), updated.GetGeneration(), metav1.ConditionFalse, "")
	if !strings.Contains(msg, "spec.match.cel[0]") || !strings.Contains(msg, "grants no allowances") {
		t.Errorf("the condition does not name the broken condition and its consequence: %s", msg)
	}
}

// expectAllowancePolicyCondition waits for the proxy to write the Ready
// condition of the policy's generation, checks its status (and reason
// when given), and returns its message.
func expectAllowancePolicyCondition(t *testing.T, dyn dynamic.Interface, name string, generation int64, status metav1.ConditionStatus, reason string) string {
	t.Helper()
	var got *metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(v1alpha1.AllowancePoliciesGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var st v1alpha1.AllowancePolicyStatus
		raw, _, _ := unstructured.NestedMap(u.Object, "status")
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
		got = meta.FindStatusCondition(st.Conditions, "Ready")
		return got != nil && got.ObservedGeneration == generation, nil
	})
	mustf(t, err, "waiting for the Ready condition of generation "+name)
	if got.Status != status || (reason != "" && got.Reason != reason) {
		t.Fatalf("Ready of %s: %s/%s (%s), want %s/%s", name, got.Status, got.Reason, got.Message, status, reason)
	}
	return got.Message
}

// TestAllowancesHoldTemplateChangeInScaleWindow: in a namespace whose
// allowance mode is enforce, with the shipped policies applied, a
// Deployment's life cycle through kube-controller-manager passes with no
// allowance denial (create, scale, image update), while a write by the
// deployment controller's identity that changes a ReplicaSet's pod
// template in a person's scale window is refused, naming the missing
// allowance, and never reaches kube-apiserver. Without the mode, the same
// write passes.
func TestAllowancesHoldTemplateChangeInScaleWindow(t *testing.T) {
	ctx := context.Background()
	applyShippedAllowancePolicies(t)

	ns := allowanceNamespace(t, "allow-enforce", "enforce")
	pause := allowanceReadyPods(t, ns)
	alice := intentPerson(t, "alice")
	d, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)
	if v := d.Annotations[annotations.Allowances]; !strings.Contains(v, `"initiator":"alice"`) || !strings.Contains(v, `"policy":"e2e-wiring-deployment-replicas"`) {
		t.Errorf("the created Deployment carries no allowances alice initiated: %q", v)
	}

	// A person scales: the deployment controller's scaling of the
	// ReplicaSet is allowed. Pods do not become ready, so the Deployment
	// stays in its scale window.
	pause(true)
	scaleDeploymentTo(t, alice, ns, rsName, 4)

	// A ReplicaSet's name is its template's hash, the same in every
	// namespace: the marker names the namespace too.
	marker := "/namespaces/" + ns + "/replicasets/" + rsName
	env.Recorder.Watch(marker)
	ctrl := intentServiceAccount(t, "deployment-controller")
	err := allowanceChangeTemplate(ctrl, ns, rsName)
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusForbidden {
		t.Fatalf("the deployment controller's template change in the scale window: %v, want 403", err)
	}
	s := status.Status()
	if !strings.Contains(s.Message, "spec.template") || !strings.Contains(s.Message, annotations.Allowances) {
		t.Errorf("the denial does not name the field and the missing allowance: %s", s.Message)
	}
	named := false
	for _, c := range s.Details.Causes {
		named = named || c.Type == decision.CauseAllowance && strings.HasPrefix(c.Field, "spec.template")
	}
	if !named {
		t.Errorf("no cause names the mutated field: %+v", s.Details.Causes)
	}
	for _, r := range env.Recorder.Requests(marker) {
		if strings.Contains(string(r.Body), allowanceEvilImage) {
			t.Errorf("the refused write reached kube-apiserver: %s %s", r.Method, r.Path)
		}
	}

	// An image update rolls out with no denial.
	pause(false)
	_, err = alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.invalid/app:2"}]}}}}`), metav1.PatchOptions{})
	mustf(t, err, "alice updates the image")
	eventually(t, 120*time.Second, "the image update rolled out", func() error {
		d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := d.Status
		if st.ObservedGeneration != d.Generation || st.UpdatedReplicas != 4 || st.AvailableReplicas != 4 || st.Replicas != 4 {
			return fmt.Errorf("generation %d status %+v", d.Generation, st)
		}
		return nil
	})
	all, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	checked := 0
	for _, l := range all {
		if l.Str("namespace") != ns {
			continue
		}
		if l.Str("allowanceMode") != "" {
			checked++
		}
		if l.Str("decision") == "Deny" && !strings.Contains(l.Str("name"), rsName) {
			t.Errorf("a write of the life cycle was denied: %v", l)
		}
	}
	if checked == 0 {
		t.Error("no decision line says allowances applied")
	}

	// A /scale's allowances reach the Deployment ahead of it; the
	// controller's scaling passes.
	before, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "reading the Deployment")
	_, err = alice.AppsV1().Deployments(ns).UpdateScale(ctx, "web",
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}, metav1.UpdateOptions{})
	mustf(t, err, "alice scales the Deployment through /scale")
	eventually(t, 120*time.Second, "the /scale carried out", func() error {
		d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		// kube-apiserver counts the annotation write ahead of the /scale
		// as a generation of a Deployment's own; the /scale makes the
		// next one, which the allowance names.
		scaled := before.Generation + 2
		if !strings.Contains(d.Annotations[annotations.Allowances], fmt.Sprintf(`"mutation":"spec.replicas","generation":%d,"initiator":"alice"`, scaled)) {
			return fmt.Errorf("no allowance of generation %d: %s", scaled, d.Annotations[annotations.Allowances])
		}
		if d.Status.ObservedGeneration != d.Generation || d.Status.AvailableReplicas != 5 {
			return fmt.Errorf("generation %d status %+v", d.Generation, d.Status)
		}
		return nil
	})

	// Without the mode, allowances change nothing: the same write passes.
	off := allowanceNamespace(t, "allow-off", "")
	pauseOff := allowanceReadyPods(t, off)
	_, offRS := intentSettledDeployment(t, alice, off, "web", 2, false)
	pauseOff(true)
	_, err = alice.AppsV1().Deployments(off).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{})
	mustf(t, err, "alice scales the Deployment")
	eventually(t, 90*time.Second, "the ReplicaSet scaled to 4", func() error {
		rs, err := alice.AppsV1().ReplicaSets(off).Get(ctx, offRS, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rs.Spec.Replicas == nil || *rs.Spec.Replicas != 4 {
			return fmt.Errorf("replicas %v", rs.Spec.Replicas)
		}
		return nil
	})
	mustf(t, allowanceChangeTemplate(ctrl, off, offRS), "the same write without allowance mode")
	for _, l := range decisionsFor(t, "replicasets", off, offRS) {
		if l.Str("allowanceMode") != "" {
			t.Errorf("allowances applied without a mode: %v", l)
		}
	}
}

const allowanceEvilImage = "registry.invalid/not-from-the-deployment:1"

// allowanceChangeTemplate changes a ReplicaSet's pod template as c.
func allowanceChangeTemplate(c kubernetes.Interface, ns, name string) error {
	ctx := context.Background()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rs, err := c.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rs.Spec.Template.Spec.Containers[0].Image = allowanceEvilImage
		_, err = c.AppsV1().ReplicaSets(ns).Update(ctx, rs, metav1.UpdateOptions{})
		return err
	})
}

// allowanceNamespace creates a namespace directly, with
// kausality.io/allowance-mode set when mode is not empty.
func allowanceNamespace(t *testing.T, prefix, mode string) string {
	t.Helper()
	name := prefix + "-" + rand.String(5)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if mode != "" {
		ns.Annotations = map[string]string{annotations.AllowanceMode: mode}
	}
	admin := clientFor(t, cluster.Direct())
	_, err := admin.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	mustf(t, err, "creating namespace "+name)
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// allowanceReadyPods stands in for the kubelet as readyPods does, and can
// be paused: new pods then stay unready, and their Deployment stays in the
// window of the change that created them.
func allowanceReadyPods(t *testing.T, ns string) (pause func(bool)) {
	t.Helper()
	var paused atomic.Bool
	c := directClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil && !paused.Load() {
				for i := range pods.Items {
					p := &pods.Items[i]
					if p.DeletionTimestamp != nil || podTerminal(p) || podReady(p) {
						continue
					}
					markReady(p)
					_, _ = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return paused.Store
}

// applyShippedAllowancePolicies creates the shipped AllowancePolicies
// (renamed, so that other tests' copies do not collide) and waits until
// the proxy reports each compiled, which it does from its cache.
func applyShippedAllowancePolicies(t *testing.T) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	for _, got := range createShippedAllowancePolicies(t, "e2e-wiring-") {
		expectAllowancePolicyCondition(t, dyn, got.GetName(), got.GetGeneration(), metav1.ConditionTrue, "Compiled")
	}
}

// scaleDeploymentTo has alice scale the Deployment web in ns to replicas
// and waits until its ReplicaSet rsName is scaled as well.
func scaleDeploymentTo(t *testing.T, alice kubernetes.Interface, ns, rsName string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	_, err := alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)), metav1.PatchOptions{})
	mustf(t, err, "alice scales the Deployment")
	eventually(t, 90*time.Second, fmt.Sprintf("the ReplicaSet scaled to %d", replicas), func() error {
		rs, err := alice.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rs.Spec.Replicas == nil || *rs.Spec.Replicas != replicas {
			return fmt.Errorf("replicas %v", rs.Spec.Replicas)
		}
		return nil
	})
}
