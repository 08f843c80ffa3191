//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// Parents of built-in kinds are cached from their protobuf watch, and a
// decision reads each as the tree kube-apiserver's JSON of the same
// version gives, managedFields made lean alike: for workloads
// kube-controller-manager reconciles, with the defaults kube-apiserver
// fills in and the status it writes.
func TestBuiltinParentsReadFromProtobufAreTheirJSON(t *testing.T) {
	ctx := context.Background()
	store := env.Interceptor.Objects()
	admin := directClient(t)
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	ns := newNamespace(t, "protobuf-parents")

	replicas := int32(1)
	no := false
	surge := intstr.FromString("50%")
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Args: []string{},
				Env:   []corev1.EnvVar{{Name: "MODE", Value: "e2e"}, {Name: "EMPTY"}},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
				SecurityContext: &corev1.SecurityContext{Privileged: &no}}},
				Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}}}
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	_, err = admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web",
		Annotations: map[string]string{"example.com/note": ""}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: selector("web"), Template: template("web"),
			Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge}}}}, metav1.CreateOptions{})
	mustf(t, err, "the Deployment")
	_, err = admin.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: selector("db"), Template: template("db"), ServiceName: "db",
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}}},
		metav1.CreateOptions{})
	mustf(t, err, "the StatefulSet")
	_, err = admin.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: appsv1.DaemonSetSpec{Selector: selector("agent"), Template: template("agent")}}, metav1.CreateOptions{})
	mustf(t, err, "the DaemonSet")
	job := template("once")
	job.Spec.RestartPolicy = corev1.RestartPolicyNever
	_, err = admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once"},
		Spec: batchv1.JobSpec{Template: job}}, metav1.CreateOptions{})
	mustf(t, err, "the Job")
	_, err = admin.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly"},
		Spec: batchv1.CronJobSpec{Schedule: "0 1 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: job}}}},
		metav1.CreateOptions{})
	mustf(t, err, "the CronJob")

	// A StatefulSet's claim templates have an apiVersion and kind in its
	// JSON that its protobuf leaves out: StatefulSets are watched in JSON.
	for _, p := range []struct {
		gvr                  schema.GroupVersionResource
		name                 string
		withStatus, protobuf bool
	}{
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "web", true, true},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, "db", true, false},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, "agent", true, true},
		{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "once", true, true},
		{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}, "nightly", false, true},
	} {
		t.Run(p.gvr.Resource, func(t *testing.T) {
			if got := store.ParentsInProtobuf(p.gvr); got != p.protobuf {
				t.Fatalf("%s watched in protobuf: %v, want %v", p.gvr, got, p.protobuf)
			}
			syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			mustf(t, store.WaitForSync(syncCtx, p.gvr), "the cache of %s syncs", p.gvr.Resource)
			eventually(t, 2*time.Minute, fmt.Sprintf("%s %s is cached as its JSON", p.gvr.Resource, p.name), func() error {
				live, err := dyn.Resource(p.gvr).Namespace(ns).Get(ctx, p.name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if _, found := live.Object["status"]; p.withStatus && !found {
					return fmt.Errorf("no status written yet")
				}
				cached, ok := store.GetCachedWhole(p.gvr, ns, p.name)
				if !ok {
					return fmt.Errorf("not cached")
				}
				if cached.GetResourceVersion() != live.GetResourceVersion() {
					return fmt.Errorf("cached at %s, stored at %s", cached.GetResourceVersion(), live.GetResourceVersion())
				}
				lean, err := objects.LeanParent(live)
				mustf(t, err, "making the live %s lean", p.name)
				if !reflect.DeepEqual(cached.Object, lean.(interface{ UnstructuredContent() map[string]interface{} }).UnstructuredContent()) {
					t.Fatalf("the cached %s differs from its JSON (-json +cached):\n%s", p.name,
						cmp.Diff(lean.(interface{ UnstructuredContent() map[string]interface{} }).UnstructuredContent(), cached.Object))
				}
				return nil
			})
		})
	}
}
