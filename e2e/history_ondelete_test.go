//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A StatefulSet updated OnDelete keeps running old revisions until its
// pods are deleted, and its controller never prunes a revision a pod
// runs. When its controller deletes one all the same, under a settled
// parent in enforce mode, that is drift, not history pruning: here pod
// db-1 runs revision 2, which is neither the current revision (db-0's)
// nor the update one, beyond revisionHistoryLimit 0.
func TestHistoryKeepsARevisionAPodStillRuns(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "ondelete", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	s := dbStatefulSet()
	s.Spec.Replicas = ptr.To[int32](2)
	s.Spec.RevisionHistoryLimit = ptr.To[int32](0)
	s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	_, err := alice.AppsV1().StatefulSets(ns).Create(ctx, s, metav1.CreateOptions{})
	mustf(t, err, "create")
	admin := directClient(t)
	waitSts := func(what string, ok func(*appsv1.StatefulSet) bool) *appsv1.StatefulSet {
		var got *appsv1.StatefulSet
		eventually(t, 90*time.Second, what, func() error {
			got, err = admin.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !ok(got) {
				return fmt.Errorf("status %+v", got.Status)
			}
			return nil
		})
		return got
	}
	waitSts("ready", func(s *appsv1.StatefulSet) bool {
		return s.Status.ReadyReplicas == 2 && s.Status.ObservedGeneration == s.Generation
	})
	_, err = alice.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.StrategicMergePatchType, setImagePatch("db", "registry.invalid/db:2"), metav1.PatchOptions{})
	mustf(t, err, "image 2")
	st := waitSts("rev2 update", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdateRevision != s.Status.CurrentRevision
	})
	rev2 := st.Status.UpdateRevision
	mustf(t, admin.CoreV1().Pods(ns).Delete(ctx, "db-1", metav1.DeleteOptions{}), "delete db-1")
	eventually(t, 90*time.Second, "db-1 at rev2", func() error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "db-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Labels["controller-revision-hash"] != rev2 || !podReady(p) {
			return fmt.Errorf("db-1 at %s", p.Labels["controller-revision-hash"])
		}
		return nil
	})
	_, err = alice.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.StrategicMergePatchType, setImagePatch("db", "registry.invalid/db:3"), metav1.PatchOptions{})
	mustf(t, err, "image 3")
	st = waitSts("rev3 update", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdateRevision != rev2 && s.Status.ReadyReplicas == 2
	})
	t.Logf("current %s update %s; rev2 %s", st.Status.CurrentRevision, st.Status.UpdateRevision, rev2)
	mark := wgMark(t)
	ssc := intentServiceAccount(t, "statefulset-controller")
	err = ssc.AppsV1().ControllerRevisions(ns).Delete(ctx, rev2, metav1.DeleteOptions{})
	wgStatus(t, err, 403, "the StatefulSet controller deletes the revision db-1 runs")
	d := wgDecisionBy(t, mark, intentSSController, "controllerrevisions", ns, rev2)
	wgExpectDecision(t, d, "Deny", "DriftUnapproved")
	if _, err := admin.AppsV1().ControllerRevisions(ns).Get(ctx, rev2, metav1.GetOptions{}); err != nil {
		t.Fatalf("the revision db-1 runs is gone: %v", err)
	}
}
