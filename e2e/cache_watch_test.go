//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// A child that changes after its cache has synced reaches the cache
// through the watch, decoded straight into what the cache keeps: its
// latest annotations, owner and resourceVersion, never its labels or
// managedFields; its deletion removes it.
func TestCachedChildFollowsItsWatch(t *testing.T) {
	ctx := context.Background()
	store := env.Interceptor.Objects()
	admin := directClient(t)
	ns := wgNamespace(t, "cache-watch", "")
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mustf(t, store.WaitForMetadataSync(syncCtx, configMapsGVR), "the cache of ConfigMaps syncs")

	owner, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	mustf(t, err, "the owner")
	yes := true
	child, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "child", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"step": "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID,
				Controller: &yes}}},
		Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{FieldManager: "someone-else"})
	mustf(t, err, "the child, created directly at kube-apiserver")

	cachedAs := func(step, resourceVersion string) func() error {
		return func() error {
			cm, src, err := store.GetMetadata(ctx, configMapsGVR, ns, "child")
			if err != nil {
				return err
			}
			if src != objects.FromCache {
				return fmt.Errorf("read %s", src)
			}
			if cm.GetAnnotations()["step"] != step || cm.GetResourceVersion() != resourceVersion {
				return fmt.Errorf("cached at step %q, resourceVersion %s; want step %q, resourceVersion %s",
					cm.GetAnnotations()["step"], cm.GetResourceVersion(), step, resourceVersion)
			}
			if len(cm.GetManagedFields()) > 0 || len(cm.GetLabels()) > 0 {
				t.Fatalf("the cache holds the child's managedFields or labels: %v %v", cm.GetManagedFields(), cm.GetLabels())
			}
			if _, ok := cm.Object["data"]; ok {
				t.Fatal("the cache holds the child's data")
			}
			if ref := metav1.GetControllerOf(cm); ref == nil || ref.UID != owner.UID {
				t.Fatalf("the cached child lost its controller: %v", cm.GetOwnerReferences())
			}
			if cm.GetUID() != child.UID || cm.GetNamespace() != ns || cm.GetName() != "child" {
				t.Fatalf("the cached child is %s/%s %s, want %s/child %s", cm.GetNamespace(), cm.GetName(), cm.GetUID(), ns, child.UID)
			}
			return nil
		}
	}
	eventually(t, time.Minute, "the new child is cached", cachedAs("1", child.ResourceVersion))

	for step := 2; step <= 3; step++ {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"step":"%d"},"labels":{"app":"web-%d"}}}`, step, step)
		child, err = admin.CoreV1().ConfigMaps(ns).Patch(ctx, "child", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "someone-else"})
		mustf(t, err, "step %d of the child", step)
		eventually(t, time.Minute, fmt.Sprintf("step %d is cached", step), cachedAs(fmt.Sprint(step), child.ResourceVersion))
	}

	mustf(t, admin.CoreV1().ConfigMaps(ns).Delete(ctx, "child", metav1.DeleteOptions{}), "deleting the child")
	eventually(t, time.Minute, "the deleted child leaves the cache", func() error {
		if _, src, err := store.GetMetadata(ctx, configMapsGVR, ns, "child"); src == objects.FromCache {
			return fmt.Errorf("still cached (err %v)", err)
		}
		return nil
	})
}
