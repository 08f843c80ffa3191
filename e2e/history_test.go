package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// ---- Revision history ----
//
// Each workload controller prunes its revision history right after a
// rollout completes, when its parent has settled at its spec: the
// deployment controller deletes scaled-down ReplicaSets beyond
// revisionHistoryLimit, the StatefulSet and DaemonSet controllers delete
// ControllerRevisions. With revisionHistoryLimit 1 and three image updates
// in a row, each prune must pass in enforce mode, the history must shrink
// to the limit, and drift on what remains must still be held.

// historyImages are the images of the create and the three updates.
var historyImages = []string{"1", "2", "3", "4"}

// waitRevisions waits until the parent keeps exactly want revisions of
// its kind (the live one and its history).
func (w *workload) waitRevisions(t *testing.T, what string, want int, count func(ctx context.Context) (int, error)) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("%s pruned to %d", what, want), func() error {
		n, err := count(context.Background())
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("%d %s, want %d", n, what, want)
		}
		return nil
	})
}

// runDeploymentHistory: create with revisionHistoryLimit 1, three image
// updates; the old ReplicaSets are pruned to one, the Deployment's status
// stays current, and a person's scale of the current ReplicaSet is still
// held against the deployment controller's revert.
func runDeploymentHistory(t *testing.T, w *workload) {
	ctx := context.Background()
	image := func(i int) string { return "registry.invalid/web:" + historyImages[i] }
	w.step(t, "create with 2 replicas and revisionHistoryLimit 1", func() {
		d := webDeployment(2)
		d.Spec.RevisionHistoryLimit = ptr.To[int32](1)
		_, err := w.alice.AppsV1().Deployments(w.ns).Create(ctx, d, metav1.CreateOptions{})
		mustf(t, err, "creating the deployment")
		w.waitDeployment(t, 2, image(0))
	})
	for i := 1; i < len(historyImages); i++ {
		w.step(t, fmt.Sprintf("image update %d of 3", i), func() {
			_, err := w.alice.AppsV1().Deployments(w.ns).Patch(ctx, "web", types.StrategicMergePatchType, setImagePatch("app", image(i)), metav1.PatchOptions{})
			mustf(t, err, "updating the image")
			w.waitDeployment(t, 2, image(i))
		})
	}
	w.step(t, "old ReplicaSets pruned to revisionHistoryLimit", func() {
		w.waitRevisions(t, "ReplicaSets", 2, func(ctx context.Context) (int, error) {
			list, err := w.admin.AppsV1().ReplicaSets(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return 0, err
			}
			return len(list.Items), nil
		})
		w.waitDeployment(t, 2, image(len(historyImages)-1))
	})
	w.requireNoFalseDenials(t, "life cycle")
	w.settled = true

	w.step(t, "drift: a person scales the current ReplicaSet from 2 to 3", func() { w.scaleReplicaSetDrift(t, 3) })
}

// controllerRevisionCount counts the ControllerRevisions in the workload's
// namespace whose controller is the named parent.
func (w *workload) controllerRevisionCount(kind, name string) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		list, err := w.admin.AppsV1().ControllerRevisions(w.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		n := 0
		for i := range list.Items {
			if owner := metav1.GetControllerOf(&list.Items[i]); owner != nil && owner.Kind == kind && owner.Name == name {
				n++
			}
		}
		return n, nil
	}
}

// runStatefulSetHistory: create with revisionHistoryLimit 1, three image
// updates; the ControllerRevisions are truncated to two.
func runStatefulSetHistory(t *testing.T, w *workload) {
	ctx := context.Background()
	image := func(i int) string { return "registry.invalid/db:" + historyImages[i] }
	w.step(t, "create with 3 replicas and revisionHistoryLimit 1", func() {
		s := dbStatefulSet()
		s.Spec.RevisionHistoryLimit = ptr.To[int32](1)
		_, err := w.alice.AppsV1().StatefulSets(w.ns).Create(ctx, s, metav1.CreateOptions{})
		mustf(t, err, "creating the statefulset")
		w.waitStatefulSet(t, image(0))
	})
	for i := 1; i < len(historyImages); i++ {
		w.step(t, fmt.Sprintf("image update %d of 3", i), func() {
			_, err := w.alice.AppsV1().StatefulSets(w.ns).Patch(ctx, "db", types.StrategicMergePatchType, setImagePatch("db", image(i)), metav1.PatchOptions{})
			mustf(t, err, "updating the image")
			w.waitStatefulSet(t, image(i))
		})
	}
	w.step(t, "ControllerRevisions truncated to revisionHistoryLimit", func() {
		w.waitRevisions(t, "ControllerRevisions", 2, w.controllerRevisionCount("StatefulSet", "db"))
	})
	w.requireNoFalseDenials(t, "life cycle")
	w.settled = true
}

// runDaemonSetHistory: create with revisionHistoryLimit 1 on the fake
// nodes, three image updates; the ControllerRevisions are truncated to two.
func runDaemonSetHistory(nodes fakeNodeSet) func(t *testing.T, w *workload) {
	return func(t *testing.T, w *workload) {
		ctx := context.Background()
		n := int32(len(nodes.names))
		image := func(i int) string { return "registry.invalid/agent:" + historyImages[i] }
		w.step(t, fmt.Sprintf("create on %d fake nodes with revisionHistoryLimit 1", n), func() {
			ds := agentDaemonSet(nodes.labels)
			ds.Spec.RevisionHistoryLimit = ptr.To[int32](1)
			_, err := w.alice.AppsV1().DaemonSets(w.ns).Create(ctx, ds, metav1.CreateOptions{})
			mustf(t, err, "creating the daemonset")
			w.waitDaemonSet(t, n, image(0))
		})
		for i := 1; i < len(historyImages); i++ {
			w.step(t, fmt.Sprintf("image update %d of 3", i), func() {
				_, err := w.alice.AppsV1().DaemonSets(w.ns).Patch(ctx, "agent", types.StrategicMergePatchType, setImagePatch("agent", image(i)), metav1.PatchOptions{})
				mustf(t, err, "updating the image")
				w.waitDaemonSet(t, n, image(i))
			})
		}
		w.step(t, "ControllerRevisions truncated to revisionHistoryLimit", func() {
			w.waitRevisions(t, "ControllerRevisions", 2, w.controllerRevisionCount("DaemonSet", "agent"))
		})
		w.requireNoFalseDenials(t, "life cycle")
		w.settled = true
	}
}
