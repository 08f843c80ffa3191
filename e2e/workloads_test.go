package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// The local control plane has no kubelet and no scheduler. readyPods and
// fakeNodes stand in for them, straight to kube-apiserver (never through
// the proxy), so that the controllers see what they would see on a real
// cluster: nodes that stay Ready, pods that start and become Ready, and
// pods of Jobs that run to completion.

// readyPods stands in for the kubelet: until the test ends, every pod in ns
// is marked Running and Ready soon after it appears, or Succeeded when it
// belongs to a Job. Controllers then see their workloads become available
// (or complete) and settle, as on a real cluster.
func readyPods(t *testing.T, ns string) {
	t.Helper()
	c := directClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range pods.Items {
					p := &pods.Items[i]
					if p.DeletionTimestamp != nil || podTerminal(p) {
						continue
					}
					switch {
					case ownedByJob(p):
						markSucceeded(p)
					case podReady(p):
						continue
					default:
						markReady(p)
					}
					_, _ = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func ownedByJob(p *corev1.Pod) bool {
	owner := metav1.GetControllerOf(p)
	return owner != nil && owner.Kind == "Job" && strings.HasPrefix(owner.APIVersion, batchv1.GroupName+"/")
}

// markReady sets the status a kubelet reports for a pod whose containers
// all started and passed their readiness probes.
func markReady(p *corev1.Pod) {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &now
	p.Status.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		started := true
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "docker-pullable://" + c.Image, ContainerID: "containerd://" + string(p.UID) + "-" + c.Name,
			Ready: true, Started: &started, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
}

// markSucceeded sets the status a kubelet reports for a pod whose
// containers all ran and exited 0: phase Succeeded, not Ready.
func markSucceeded(p *corev1.Pod) {
	now := metav1.Now()
	p.Status.Phase = corev1.PodSucceeded
	p.Status.StartTime = &now
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now},
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		started := false
		id := "containerd://" + string(p.UID) + "-" + c.Name
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "docker-pullable://" + c.Image, ContainerID: id,
			Ready: false, Started: &started, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: id,
			}},
		})
	}
}

// fakeNodeSet is a group of fake nodes; labels are on each of them, for a
// nodeSelector that keeps a DaemonSet to this group.
type fakeNodeSet struct {
	names  []string
	labels map[string]string
}

// fakeNodes creates n Ready, schedulable nodes, keeps them Ready until the
// test ends and deletes them then. Without kubelet heartbeats the node
// lifecycle controller would mark them unreachable after its grace period
// (40s) and taint them, so their Lease and Ready condition are renewed in
// the background, as a kubelet does.
func fakeNodes(t *testing.T, n int) fakeNodeSet {
	t.Helper()
	ctx := context.Background()
	c := directClient(t)
	group := "fake-" + rand.String(5)
	set := fakeNodeSet{labels: map[string]string{"e2e.kausality.io/fake-node-set": group}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", group, i)
		labels := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
		for k, v := range set.labels {
			labels[k] = v
		}
		_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		mustf(t, err, "creating fake node %s", name)
		set.names = append(set.names, name)
	}
	hbCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			for _, name := range set.names {
				// A missed beat is retried 5s later, well within the grace period.
				_ = heartbeat(hbCtx, c, name)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		for _, name := range set.names {
			_ = c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			_ = c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	// The first heartbeat is synchronous, so the nodes are Ready when
	// fakeNodes returns. The node lifecycle controller writes new nodes
	// too (taints, annotations): a conflict is retried from fresh state.
	for _, name := range set.names {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error { return heartbeat(ctx, c, name) })
		mustf(t, err, "first heartbeat of fake node %s", name)
	}
	return set
}

// heartbeat does what a kubelet does periodically: renew the node's Lease
// and report its status with a fresh Ready heartbeat.
func heartbeat(ctx context.Context, c kubernetes.Interface, name string) error {
	now := metav1.NowMicro()
	leases := c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
	case err == nil:
		lease.Spec.RenewTime = &now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	node.Status = fakeNodeStatus(node, metav1.Time(now))
	_, err = c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// fakeNodeStatus is a healthy kubelet's report, keeping the transition
// times of conditions that did not change.
func fakeNodeStatus(node *corev1.Node, now metav1.Time) corev1.NodeStatus {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	want := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "fake kubelet is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated"},
	}
	for i := range want {
		want[i].LastHeartbeatTime = now
		want[i].LastTransitionTime = now
		for _, old := range node.Status.Conditions {
			if old.Type == want[i].Type && old.Status == want[i].Status {
				want[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	return corev1.NodeStatus{
		Capacity:    resources,
		Allocatable: resources,
		Phase:       corev1.NodeRunning,
		Conditions:  want,
		Addresses:   []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: node.Name}},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v1.35.0-fake",
			ContainerRuntimeVersion: "containerd://fake", KernelVersion: "fake", OSImage: "fake",
		},
	}
}

// ---- Workload scenarios ----
//
// Each built-in workload runs through its life cycle in its own enforce
// namespace, every change made by a person through the proxy and every
// reaction by kube-controller-manager's controllers through the proxy. The
// proxy must let all of it through (zero denials), and after the workload
// has settled it must still catch a controller reverting a person's change
// to a child (an injected drift). fidelity_test.go runs the scenarios and
// turns their decision lines into docs/fidelity.md.

const (
	kcmServiceAccountPrefix = "system:serviceaccount:kube-system:"
	replicasetController    = kcmServiceAccountPrefix + "replicaset-controller"
	statefulsetController   = kcmServiceAccountPrefix + "statefulset-controller"
	daemonsetController     = kcmServiceAccountPrefix + "daemon-set-controller"
)

// workload is one scenario's state, shared between its phases and the
// report.
type workload struct {
	kind string
	// slug names the namespace when kind is not a valid name.
	slug string
	ns   string
	// alice makes the changes a person makes; bob is the person who edits a
	// child behind the controller's back. Both talk to the proxy.
	alice, bob kubernetes.Interface
	aliceCfg   *rest.Config
	admin      kubernetes.Interface

	// run is the scenario under the default config: life cycle first, then
	// (for some kinds) an injected drift that needs no config change.
	run func(t *testing.T, w *workload)
	// gatedDrift, when set, injects a drift once Pods and Jobs are gated
	// (ungatedChildKinds: []), after run has left the workload settled.
	gatedDrift func(t *testing.T, w *workload)
	// plannedDrifts is how many drifts the scenario injects when it runs
	// to the end.
	plannedDrifts int

	steps   []string
	drifts  []*injectedDrift
	settled bool
}

// step runs one action of the scenario and notes it for the report.
func (w *workload) step(t *testing.T, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	w.steps = append(w.steps, what)
	t.Logf("%s: %s (%s)", w.kind, what, time.Since(start).Round(100*time.Millisecond))
}

// injectedDrift is a person's change to a child that its controller will
// try to revert while the parent is settled: the revert is drift. Deny
// lines after mark by controller for the child are this drift's, not
// false denials.
type injectedDrift struct {
	what       string
	controller string
	resource   string
	name       string
	namePrefix bool
	mark       int
	caught     bool
}

func (d *injectedDrift) covers(index int, l framework.DecisionLine) bool {
	if index < d.mark || l.Str("user") != d.controller || l.Str("resource") != d.resource {
		return false
	}
	if d.namePrefix {
		return strings.HasPrefix(l.Str("name"), d.name)
	}
	return l.Str("name") == d.name
}

// decisionMark is the current length of the decision log: lines at or
// after it happened later.
func decisionMark(t *testing.T) int {
	t.Helper()
	all, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	return len(all)
}

// falseDenials are the Deny lines in w's namespace that no injected drift
// accounts for.
func (w *workload) falseDenials(all []framework.DecisionLine) []framework.DecisionLine {
	var out []framework.DecisionLine
	for i, l := range all {
		if l.Str("namespace") != w.ns || l.Str("decision") != "Deny" {
			continue
		}
		injected := false
		for _, d := range w.drifts {
			injected = injected || d.covers(i, l)
		}
		if !injected {
			out = append(out, l)
		}
	}
	return out
}

// requireNoFalseDenials fails the test, listing them, when any write in
// w's namespace was denied other than an injected drift.
func (w *workload) requireNoFalseDenials(t *testing.T, phase string) {
	t.Helper()
	all, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	if bad := w.falseDenials(all); len(bad) > 0 {
		t.Fatalf("%s, %s: %d false denials:\n%s", w.kind, phase, len(bad), formatLines(bad))
	}
}

// logDenials lists the Deny lines in w's namespace: the first thing to
// look at when a rollout did not complete.
func (w *workload) logDenials(t *testing.T) {
	all, err := cluster.Decisions()
	if err != nil {
		t.Logf("reading decisions: %v", err)
		return
	}
	if bad := w.falseDenials(all); len(bad) > 0 {
		t.Logf("%s: false denials in %s:\n%s", w.kind, w.ns, formatLines(bad))
	}
}

func formatLines(lines []framework.DecisionLine) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %s %s %s/%s%s: %s category=%s reason=%q parent=%s gen=%v observed=%v phase=%s controllerMethod=%s\n",
			l.Str("user"), l.Str("verb"), l.Str("resource"), l.Str("name"), subresourceSuffix(l), l.Str("decision"),
			l.Str("category"), l.Str("reason"), l.Str("parent"), l["parentGeneration"], l["parentObservedGeneration"],
			l.Str("lifecyclePhase"), l.Str("controllerMethod"))
	}
	return b.String()
}

func subresourceSuffix(l framework.DecisionLine) string {
	if s := l.Str("subresource"); s != "" {
		return "/" + s
	}
	return ""
}

// injectDrift records d, lets inject make the person's change, waits until
// the controller's revert is denied as DriftUnapproved and then checks for
// 15 s (held returns nil) that the person's change stays: the controller's
// retries are denied too.
func (w *workload) injectDrift(t *testing.T, d *injectedDrift, inject func(), held func() error) {
	t.Helper()
	d.mark = decisionMark(t)
	w.drifts = append(w.drifts, d)
	inject()
	eventually(t, 60*time.Second, w.kind+": the controller's revert of "+d.what+" is denied", func() error {
		all, err := cluster.Decisions()
		if err != nil {
			return err
		}
		for i, l := range all {
			if l.Str("namespace") == w.ns && d.covers(i, l) && l.Str("decision") == "Deny" && l.Str("category") == "DriftUnapproved" {
				return nil
			}
		}
		return fmt.Errorf("no Deny/DriftUnapproved line by %s for %s %s yet", d.controller, d.resource, d.name)
	})
	for i := 0; i < 15; i++ {
		if err := held(); err != nil {
			t.Fatalf("%s: %s was reverted after %ds: %v", w.kind, d.what, i, err)
		}
		time.Sleep(time.Second)
	}
	if err := held(); err != nil {
		t.Fatalf("%s: %s was reverted after 15s: %v", w.kind, d.what, err)
	}
	d.caught = true
}

// ---- Deployment ----

func webDeployment(replicas int32) *appsv1.Deployment {
	d := testDeployment("web", replicas)
	d.Spec.Template.Spec.Containers[0].Image = "registry.invalid/web:1"
	d.Spec.Strategy = appsv1.DeploymentStrategy{
		Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
		},
	}
	return d
}

// deploymentRolledOut is kstatus' Current for a Deployment at the given
// size and image: every replica updated, available and no old ones left.
func deploymentRolledOut(d *appsv1.Deployment, replicas int32, image string) error {
	s := d.Status
	if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
		return fmt.Errorf("template image %s, want %s", got, image)
	}
	if *d.Spec.Replicas != replicas {
		return fmt.Errorf("spec.replicas %d, want %d", *d.Spec.Replicas, replicas)
	}
	if s.ObservedGeneration != d.Generation || s.Replicas != replicas || s.UpdatedReplicas != replicas ||
		s.ReadyReplicas != replicas || s.AvailableReplicas != replicas {
		return fmt.Errorf("generation %d observed %d; replicas %d updated %d ready %d available %d",
			d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas)
	}
	for _, c := range s.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionTrue && c.Reason == "NewReplicaSetAvailable" {
			return nil
		}
	}
	return fmt.Errorf("not Progressing/NewReplicaSetAvailable yet")
}

func (w *workload) waitDeployment(t *testing.T, replicas int32, image string) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("deployment rolled out at %d replicas of %s", replicas, image), func() error {
		d, err := w.admin.AppsV1().Deployments(w.ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return deploymentRolledOut(d, replicas, image)
	})
}

func (w *workload) scaleDeployment(t *testing.T, replicas int32) {
	t.Helper()
	_, err := w.alice.AppsV1().Deployments(w.ns).UpdateScale(context.Background(), "web",
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: w.ns}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}, metav1.UpdateOptions{})
	mustf(t, err, "alice scales the deployment to %d", replicas)
	w.waitDeployment(t, replicas, "registry.invalid/web:2")
}

func setImagePatch(container, image string) []byte {
	return []byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"image":%q}]}}}}`, container, image))
}

// runDeployment: create, image update, scale up and down, rollout undo, a
// pod deleted by a person and re-created by the ReplicaSet controller
// (self-healing, allowed), then a person scaling the ReplicaSet: the
// deployment controller's revert is drift.
func runDeployment(t *testing.T, w *workload) {
	ctx := context.Background()
	w.step(t, "create with 3 replicas (RollingUpdate, maxSurge 1, maxUnavailable 0)", func() {
		_, err := w.alice.AppsV1().Deployments(w.ns).Create(ctx, webDeployment(3), metav1.CreateOptions{})
		mustf(t, err, "creating the deployment")
		w.waitDeployment(t, 3, "registry.invalid/web:1")
	})
	w.step(t, "image update", func() {
		_, err := w.alice.AppsV1().Deployments(w.ns).Patch(ctx, "web", types.StrategicMergePatchType, setImagePatch("app", "registry.invalid/web:2"), metav1.PatchOptions{})
		mustf(t, err, "updating the image")
		w.waitDeployment(t, 3, "registry.invalid/web:2")
	})
	w.step(t, "scale up to 5", func() { w.scaleDeployment(t, 5) })
	w.step(t, "scale down to 2", func() { w.scaleDeployment(t, 2) })
	w.step(t, "kubectl rollout undo", func() {
		newKubectl(t, w.aliceCfg).run("", "rollout", "undo", "deployment/web", "-n", w.ns)
		w.waitDeployment(t, 2, "registry.invalid/web:1")
	})
	w.step(t, "a person deletes a pod, the ReplicaSet controller re-creates it", func() { w.deletePodSelfHealing(t) })
	w.requireNoFalseDenials(t, "life cycle")
	w.settled = true

	w.step(t, "drift: a person scales the ReplicaSet from 2 to 3", func() { w.scaleReplicaSetDrift(t, 3) })
}

// scaleReplicaSetDrift: bob scales the Deployment's one scaled ReplicaSet
// to replicas; the deployment controller's revert is drift and held.
func (w *workload) scaleReplicaSetDrift(t *testing.T, replicas int32) {
	t.Helper()
	rs := w.scaledReplicaSet(t)
	d := &injectedDrift{what: fmt.Sprintf("bob's scale of ReplicaSet %s to %d", rs, replicas), controller: deploymentController, resource: "replicasets", name: rs}
	w.injectDrift(t, d, func() { scaleRS(t, "bob", w.ns, rs, replicas) }, func() error {
		got, err := w.admin.AppsV1().ReplicaSets(w.ns).Get(context.Background(), rs, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *got.Spec.Replicas != replicas {
			return fmt.Errorf("replicas %d", *got.Spec.Replicas)
		}
		return nil
	})
}

// deletePodSelfHealing: bob deletes one pod; the ReplicaSet controller
// re-creates it under a settled ReplicaSet, which is self-healing, allowed
// by default.
func (w *workload) deletePodSelfHealing(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pods, err := w.admin.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	mustf(t, err, "listing pods")
	if len(pods.Items) != 2 {
		t.Fatalf("%d pods before the deletion, want 2", len(pods.Items))
	}
	victim := pods.Items[0].Name
	mark := decisionMark(t)
	mustf(t, w.bob.CoreV1().Pods(w.ns).Delete(ctx, victim, metav1.DeleteOptions{}), "bob deletes pod %s", victim)
	eventually(t, 60*time.Second, "the deleted pod is replaced", func() error {
		pods, err := w.admin.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Name == victim {
				return fmt.Errorf("pod %s still there", victim)
			}
		}
		if len(pods.Items) != 2 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		return nil
	})
	w.waitDeployment(t, 2, "registry.invalid/web:1")
	var creates []framework.DecisionLine
	// The line of an allowed write is logged once kube-apiserver has
	// answered, so it may land after the pod is visible.
	eventually(t, 15*time.Second, "a decision line for the re-create", func() error {
		all, err := cluster.Decisions()
		if err != nil {
			return err
		}
		creates = nil
		for _, l := range all[mark:] {
			if l.Str("namespace") == w.ns && l.Str("resource") == "pods" && l.Str("verb") == "create" && l.Str("user") == replicasetController {
				creates = append(creates, l)
			}
		}
		if len(creates) == 0 {
			return fmt.Errorf("no pod create by the ReplicaSet controller logged")
		}
		return nil
	})
	if len(creates) != 1 || creates[0].Str("decision") != "Allow" || creates[0].Str("category") != "SelfHealing" {
		t.Errorf("the ReplicaSet controller's re-create should be one Allow/SelfHealing line, got %d:\n%s", len(creates), formatLines(creates))
	}
}

// scaledReplicaSet is the Deployment's ReplicaSet that has the replicas.
func (w *workload) scaledReplicaSet(t *testing.T) string {
	t.Helper()
	list, err := w.admin.AppsV1().ReplicaSets(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
	mustf(t, err, "listing replicasets")
	var names []string
	for _, rs := range list.Items {
		if *rs.Spec.Replicas > 0 {
			names = append(names, rs.Name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("want one scaled ReplicaSet, got %v", names)
	}
	return names[0]
}

// ---- StatefulSet ----

func dbStatefulSet() *appsv1.StatefulSet {
	labels := map[string]string{"app": "db"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](3),
			ServiceName:         "db",
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.invalid/db:1"}}},
			},
		},
	}
}

func statefulSetRolledOut(s *appsv1.StatefulSet, image string) error {
	if got := s.Spec.Template.Spec.Containers[0].Image; got != image {
		return fmt.Errorf("template image %s, want %s", got, image)
	}
	st := s.Status
	want := *s.Spec.Replicas
	if st.ObservedGeneration != s.Generation || st.Replicas != want || st.ReadyReplicas != want || st.AvailableReplicas != want ||
		st.UpdatedReplicas != want || st.CurrentRevision != st.UpdateRevision {
		return fmt.Errorf("generation %d observed %d; replicas %d ready %d available %d updated %d; revision %s, update revision %s",
			s.Generation, st.ObservedGeneration, st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas, st.CurrentRevision, st.UpdateRevision)
	}
	return nil
}

func (w *workload) waitStatefulSet(t *testing.T, image string) {
	t.Helper()
	eventually(t, 90*time.Second, "statefulset rolled out at "+image, func() error {
		s, err := w.admin.AppsV1().StatefulSets(w.ns).Get(context.Background(), "db", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return statefulSetRolledOut(s, image)
	})
}

// runStatefulSet: create (OrderedReady: one pod after the other) and an
// image update (RollingUpdate, highest ordinal first).
func runStatefulSet(t *testing.T, w *workload) {
	ctx := context.Background()
	w.step(t, "create with 3 replicas (OrderedReady)", func() {
		_, err := w.alice.AppsV1().StatefulSets(w.ns).Create(ctx, dbStatefulSet(), metav1.CreateOptions{})
		mustf(t, err, "creating the statefulset")
		w.waitStatefulSet(t, "registry.invalid/db:1")
	})
	w.step(t, "image update (RollingUpdate)", func() {
		_, err := w.alice.AppsV1().StatefulSets(w.ns).Patch(ctx, "db", types.StrategicMergePatchType, setImagePatch("db", "registry.invalid/db:2"), metav1.PatchOptions{})
		mustf(t, err, "updating the image")
		w.waitStatefulSet(t, "registry.invalid/db:2")
	})
	w.requireNoFalseDenials(t, "life cycle")
	w.settled = true
}

// statefulSetPodDeleted: with Pods gated, bob deletes db-1 and the
// StatefulSet controller's re-create of it is drift.
func statefulSetPodDeleted(t *testing.T, w *workload) {
	ctx := context.Background()
	w.waitStatefulSet(t, "registry.invalid/db:2")
	w.step(t, "drift (Pods gated): a person deletes pod db-1", func() {
		d := &injectedDrift{what: "bob's deletion of pod db-1", controller: statefulsetController, resource: "pods", name: "db-1"}
		w.injectDrift(t, d, func() {
			mustf(t, w.bob.CoreV1().Pods(w.ns).Delete(ctx, "db-1", metav1.DeleteOptions{}), "bob deletes db-1")
		}, func() error {
			p, err := w.admin.CoreV1().Pods(w.ns).Get(ctx, "db-1", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("pod db-1 exists again (uid %s)", p.UID)
		})
	})
}

// ---- DaemonSet ----

func agentDaemonSet(nodeSelector map[string]string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "agent"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: nodeSelector,
					Containers:   []corev1.Container{{Name: "agent", Image: "registry.invalid/agent:1"}},
				},
			},
		},
	}
}

func daemonSetRolledOut(ds *appsv1.DaemonSet, nodes int32, image string) error {
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != image {
		return fmt.Errorf("template image %s, want %s", got, image)
	}
	s := ds.Status
	if s.ObservedGeneration != ds.Generation || s.DesiredNumberScheduled != nodes || s.CurrentNumberScheduled != nodes ||
		s.UpdatedNumberScheduled != nodes || s.NumberReady != nodes || s.NumberAvailable != nodes || s.NumberMisscheduled != 0 {
		return fmt.Errorf("generation %d observed %d; desired %d current %d updated %d ready %d available %d misscheduled %d",
			ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.UpdatedNumberScheduled,
			s.NumberReady, s.NumberAvailable, s.NumberMisscheduled)
	}
	return nil
}

func (w *workload) waitDaemonSet(t *testing.T, nodes int32, image string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 90*time.Second, "daemonset rolled out at "+image, func() error {
		ds, err := w.admin.AppsV1().DaemonSets(w.ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := daemonSetRolledOut(ds, nodes, image); err != nil {
			return err
		}
		// The status counts pods per node; old pods must be gone too.
		pods, err := w.admin.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			return err
		}
		if int32(len(pods.Items)) != nodes {
			return fmt.Errorf("%d pods on %d nodes", len(pods.Items), nodes)
		}
		return nil
	})
}

// runDaemonSet: create on the fake nodes and an image update.
func runDaemonSet(nodes fakeNodeSet) func(t *testing.T, w *workload) {
	return func(t *testing.T, w *workload) {
		ctx := context.Background()
		n := int32(len(nodes.names))
		w.step(t, fmt.Sprintf("create on %d fake nodes", n), func() {
			_, err := w.alice.AppsV1().DaemonSets(w.ns).Create(ctx, agentDaemonSet(nodes.labels), metav1.CreateOptions{})
			mustf(t, err, "creating the daemonset")
			w.waitDaemonSet(t, n, "registry.invalid/agent:1")
		})
		w.step(t, "image update (RollingUpdate)", func() {
			_, err := w.alice.AppsV1().DaemonSets(w.ns).Patch(ctx, "agent", types.StrategicMergePatchType, setImagePatch("agent", "registry.invalid/agent:2"), metav1.PatchOptions{})
			mustf(t, err, "updating the image")
			w.waitDaemonSet(t, n, "registry.invalid/agent:2")
		})
		w.requireNoFalseDenials(t, "life cycle")
		w.settled = true
	}
}

// daemonSetPodDeleted: with Pods gated, bob deletes one daemon pod and the
// DaemonSet controller's re-create of it is drift.
func daemonSetPodDeleted(nodes fakeNodeSet) func(t *testing.T, w *workload) {
	return func(t *testing.T, w *workload) {
		ctx := context.Background()
		n := int32(len(nodes.names))
		w.waitDaemonSet(t, n, "registry.invalid/agent:2")
		pods, err := w.admin.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		mustf(t, err, "listing pods")
		victim := pods.Items[0].Name
		w.step(t, "drift (Pods gated): a person deletes a daemon pod", func() {
			// The re-create has a generated name: any pod the controller
			// creates for the DaemonSet after the deletion is the revert.
			d := &injectedDrift{what: "bob's deletion of pod " + victim, controller: daemonsetController, resource: "pods", name: "agent-", namePrefix: true}
			w.injectDrift(t, d, func() {
				mustf(t, w.bob.CoreV1().Pods(w.ns).Delete(ctx, victim, metav1.DeleteOptions{}), "bob deletes %s", victim)
			}, func() error {
				pods, err := w.admin.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
				if err != nil {
					return err
				}
				if int32(len(pods.Items)) != n-1 {
					return fmt.Errorf("%d pods on %d nodes", len(pods.Items), n)
				}
				return nil
			})
		})
	}
}

// ---- Job and CronJob ----
//
// Neither has revert behaviour to test: the Job controller does not
// re-create the pods of a finished Job, and the CronJob controller does not
// undo a person's change to a Job it started; it only starts new ones on
// schedule. They run with zero denials and no injected drift.

func batchJobSpec() batchv1.JobSpec {
	return batchv1.JobSpec{
		Completions: ptr.To[int32](1),
		Parallelism: ptr.To[int32](1),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "work", Image: "registry.invalid/work:1", Command: []string{"true"}}},
		}},
	}
}

func jobComplete(j *batchv1.Job) error {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			if j.Status.Succeeded != 1 {
				return fmt.Errorf("complete with %d succeeded", j.Status.Succeeded)
			}
			return nil
		}
	}
	return fmt.Errorf("not complete: active %d succeeded %d failed %d", j.Status.Active, j.Status.Succeeded, j.Status.Failed)
}

// runJob: a Job runs to completion.
func runJob(t *testing.T, w *workload) {
	ctx := context.Background()
	w.step(t, "run to completion", func() {
		_, err := w.alice.BatchV1().Jobs(w.ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Spec: batchJobSpec()}, metav1.CreateOptions{})
		mustf(t, err, "creating the job")
		eventually(t, 90*time.Second, "job complete", func() error {
			j, err := w.admin.BatchV1().Jobs(w.ns).Get(ctx, "batch", metav1.GetOptions{})
			if err != nil {
				return err
			}
			return jobComplete(j)
		})
	})
	w.requireNoFalseDenials(t, "life cycle")
	w.settled = true
}

// runCronJob: a CronJob starts a Job at the next minute boundary, the Job
// completes, and a person suspends the CronJob so it starts no more while
// the other scenarios finish.
func runCronJob(t *testing.T, w *workload) {
	ctx := context.Background()
	w.step(t, `schedule "* * * * *" starts a Job that completes`, func() {
		cj := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: "tick"},
			Spec: batchv1.CronJobSpec{
				Schedule:          "* * * * *",
				ConcurrencyPolicy: batchv1.ForbidConcurrent,
				JobTemplate:       batchv1.JobTemplateSpec{Spec: batchJobSpec()},
			},
		}
		_, err := w.alice.BatchV1().CronJobs(w.ns).Create(ctx, cj, metav1.CreateOptions{})
		mustf(t, err, "creating the cronjob")
		// Up to a minute to the next boundary, then the controller's delay.
		eventually(t, 100*time.Second, "the cronjob's job completes", func() error {
			jobs, err := w.admin.BatchV1().Jobs(w.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for i := range jobs.Items {
				if owner := metav1.GetControllerOf(&jobs.Items[i]); owner == nil || owner.Kind != "CronJob" {
					continue
				}
				if err := jobComplete(&jobs.Items[i]); err != nil {
					return fmt.Errorf("job %s: %w", jobs.Items[i].Name, err)
				}
				return nil
			}
			return fmt.Errorf("no job started yet")
		})
		eventually(t, 30*time.Second, "the cronjob records the success", func() error {
			cj, err := w.admin.BatchV1().CronJobs(w.ns).Get(ctx, "tick", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cj.Status.LastSuccessfulTime == nil || len(cj.Status.Active) != 0 {
				return fmt.Errorf("lastSuccessfulTime %v, %d active", cj.Status.LastSuccessfulTime, len(cj.Status.Active))
			}
			return nil
		})
	})
	w.step(t, "suspend", func() {
		_, err := w.alice.BatchV1().CronJobs(w.ns).Patch(ctx, "tick", types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{})
		mustf(t, err, "suspending the cronjob")
	})
	w.requireNoFalseDenials(t, "life cycle")
	w.settled = true
}
