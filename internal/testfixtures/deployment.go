// Package testfixtures holds objects that several packages' tests share.
package testfixtures

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Deployment returns a Deployment of the size a real controller writes
// (three containers with env, resources and probes; several labels).
func Deployment() *appsv1.Deployment {
	replicas := int32(3)
	container := func(name, image string) corev1.Container {
		return corev1.Container{
			Name:  name,
			Image: image,
			Args:  []string{"--v=2", "--metrics-bind-address=:8080", "--leader-elect"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				{Name: "LOG_LEVEL", Value: "info"},
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
			},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 10},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}, PeriodSeconds: 5},
			VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/config", ReadOnly: true}},
		}
	}
	labels := map[string]string{"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": "web-prod", "app.kubernetes.io/component": "frontend"}
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default", Labels: labels,
			Annotations:     map[string]string{"deployment.kubernetes.io/revision": "4"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "web", UID: "1234", Controller: ptr.To(true)}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:         []corev1.Container{container("app", "nginx:1.25"), container("sidecar", "envoy:1.30"), container("metrics", "exporter:0.9")},
					Volumes:            []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}}},
					ServiceAccountName: "web",
				},
			},
		},
	}
}
