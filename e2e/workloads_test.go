package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// readyPods stands in for the kubelet, which the local control plane does
// not have: until the test ends, every pod in ns is marked Running, and
// Ready, soon after it appears. Controllers then see their workloads become
// available and settle, as on a real cluster.
func readyPods(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	c := directClient(t)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range pods.Items {
					p := &pods.Items[i]
					if p.DeletionTimestamp != nil || podReady(p) {
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
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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
