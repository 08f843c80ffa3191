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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// Parents of built-in kinds are cached from their protobuf watch, and a
// decision reads each as the tree kube-apiserver's JSON of the same
// version gives, managedFields made lean alike: for workloads
// kube-controller-manager reconciles, with the defaults kube-apiserver
// fills in and the status it writes. The specs set what protobuf and JSON
// could render apart: zero-valued pointers, empty maps, slices and
// messages, quantities in other than their canonical form, int and string
// intstrs, and the optional fields of every kind.
func TestBuiltinParentsReadFromProtobufAreTheirJSON(t *testing.T) {
	ctx := context.Background()
	store := env.Interceptor.Objects()
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	ns := newNamespace(t, "protobuf-parents")
	createRichParents(ctx, t, directClient(t), ns)

	// A StatefulSet's claim templates have an apiVersion and kind in its
	// JSON that its protobuf leaves out: StatefulSets are watched in JSON.
	// Each is compared once its controller has written the status field
	// named, so that the status is compared too.
	for _, p := range []struct {
		gvr      schema.GroupVersionResource
		name     string
		written  []string
		protobuf bool
	}{
		{appsV1("deployments"), "web", []string{"status", "replicas"}, true},
		{appsV1("deployments"), "paused", []string{"status", "observedGeneration"}, true},
		{appsV1("statefulsets"), "db", []string{"status", "observedGeneration"}, false},
		{appsV1("daemonsets"), "agent", []string{"status", "observedGeneration"}, true},
		{appsV1("daemonsets"), "ondelete", []string{"status", "observedGeneration"}, true},
		{appsV1("replicasets"), "cache", []string{"status", "fullyLabeledReplicas"}, true},
		{coreV1("replicationcontrollers"), "legacy", []string{"status", "observedGeneration"}, true},
		{batchV1("jobs"), "once", []string{"status", "active"}, true},
		{batchV1("jobs"), "indexed", []string{"status", "conditions"}, true},
		{batchV1("cronjobs"), "nightly", nil, true},
	} {
		t.Run(p.gvr.Resource+"/"+p.name, func(t *testing.T) {
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
				if _, found, _ := unstructured.NestedFieldNoCopy(live.Object, p.written...); p.written != nil && !found {
					return fmt.Errorf("no %v written yet", p.written)
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

func appsV1(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: resource}
}

func batchV1(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: resource}
}

func coreV1(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Version: "v1", Resource: resource}
}

// createRichParents creates, in ns, the parents the test compares.
func createRichParents(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns string) {
	t.Helper()
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "e2e", "empty": ""},
			Annotations: map[string]string{"example.com/note": "", "example.com/owner": "e2e"}}
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}}
	}
	surgeHalf, unavailableNone := intstr.FromString("50%"), intstr.FromInt32(0)
	_, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: meta("web"),
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: selector("web"), Template: richPodTemplate("web"),
			MinReadySeconds: 5, ProgressDeadlineSeconds: ptr.To[int32](120),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surgeHalf, MaxUnavailable: &unavailableNone}}}}, metav1.CreateOptions{})
	mustf(t, err, "the Deployment web")
	_, err = admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: meta("paused"),
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: selector("paused"), Template: richPodTemplate("paused"),
			Paused: true, MinReadySeconds: 30, ProgressDeadlineSeconds: ptr.To[int32](600), RevisionHistoryLimit: ptr.To[int32](0),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}}}, metav1.CreateOptions{})
	mustf(t, err, "the Deployment paused")
	plain := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db", "tier": "data"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.k8s.io/pause:3.10"}}}}
	_, err = admin.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta("db"),
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: selector("db"), Template: plain, ServiceName: "db",
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}}},
		metav1.CreateOptions{})
	mustf(t, err, "the StatefulSet")
	surgeTenth := intstr.FromString("10%")
	_, err = admin.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta("agent"),
		Spec: appsv1.DaemonSetSpec{Selector: selector("agent"), Template: richPodTemplate("agent"),
			MinReadySeconds: 3, RevisionHistoryLimit: ptr.To[int32](3),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: &surgeTenth, MaxUnavailable: &unavailableNone}}}}, metav1.CreateOptions{})
	mustf(t, err, "the DaemonSet agent")
	_, err = admin.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta("ondelete"),
		Spec: appsv1.DaemonSetSpec{Selector: selector("ondelete"), Template: richPodTemplate("ondelete"),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}}}, metav1.CreateOptions{})
	mustf(t, err, "the DaemonSet ondelete")
	_, err = admin.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta("cache"),
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2), MinReadySeconds: 7, Selector: selector("cache"),
			Template: richPodTemplate("cache")}}, metav1.CreateOptions{})
	mustf(t, err, "the ReplicaSet")
	legacy := richPodTemplate("legacy")
	_, err = admin.CoreV1().ReplicationControllers(ns).Create(ctx, &corev1.ReplicationController{ObjectMeta: meta("legacy"),
		Spec: corev1.ReplicationControllerSpec{Replicas: ptr.To[int32](0),
			Selector: map[string]string{"app": "legacy"}, Template: &legacy}}, metav1.CreateOptions{})
	mustf(t, err, "the ReplicationController")
	createRichJobs(ctx, t, admin, ns, meta)
}

// createRichJobs creates the Jobs and the CronJob the test compares.
func createRichJobs(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns string, meta func(string) metav1.ObjectMeta) {
	t.Helper()
	never := func(app string) corev1.PodTemplateSpec {
		p := richPodTemplate(app)
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.ActiveDeadlineSeconds = ptr.To[int64](3600)
		return p
	}
	_, err := admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: meta("once"),
		Spec: batchv1.JobSpec{Template: never("once"), BackoffLimit: ptr.To[int32](0), ActiveDeadlineSeconds: ptr.To[int64](3600),
			TTLSecondsAfterFinished: ptr.To[int32](0), PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr.To("app"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
				{Action: batchv1.PodFailurePolicyActionCount, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0, 1}}},
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
			}}}}, metav1.CreateOptions{})
	mustf(t, err, "the Job once")
	indexed := batchv1.IndexedCompletion
	_, err = admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: meta("indexed"),
		Spec: batchv1.JobSpec{Template: never("indexed"), Suspend: ptr.To(true), CompletionMode: &indexed,
			Completions: ptr.To[int32](4), Parallelism: ptr.To[int32](2), BackoffLimitPerIndex: ptr.To[int32](1),
			MaxFailedIndexes: ptr.To[int32](1), ActiveDeadlineSeconds: ptr.To[int64](600), TTLSecondsAfterFinished: ptr.To[int32](60),
			SuccessPolicy: &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{
				{SucceededIndexes: ptr.To("0-1,3"), SucceededCount: ptr.To[int32](2)}}},
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3, 5}}},
			}}}}, metav1.CreateOptions{})
	mustf(t, err, "the Job indexed")
	_, err = admin.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{ObjectMeta: meta("nightly"),
		Spec: batchv1.CronJobSpec{Schedule: "30 1 * * 1-5", TimeZone: ptr.To("Europe/Berlin"), StartingDeadlineSeconds: ptr.To[int64](200),
			ConcurrencyPolicy: batchv1.ForbidConcurrent, Suspend: ptr.To(true),
			SuccessfulJobsHistoryLimit: ptr.To[int32](0), FailedJobsHistoryLimit: ptr.To[int32](2),
			JobTemplate: batchv1.JobTemplateSpec{ObjectMeta: meta(""), Spec: batchv1.JobSpec{Template: never("nightly"),
				BackoffLimit: ptr.To[int32](2), PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{}}}}}},
		metav1.CreateOptions{})
	mustf(t, err, "the CronJob")
}

// richPodTemplate is a pod template, labelled app and tier, that sets
// most of what a pod's spec can hold.
func richPodTemplate(app string) corev1.PodTemplateSpec {
	always := corev1.ContainerRestartPolicyAlways
	fieldRef := func(path string) *corev1.ObjectFieldSelector { return &corev1.ObjectFieldSelector{FieldPath: path} }
	matchApp := &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app, "tier": ""},
			Annotations: map[string]string{"example.com/empty": "", "example.com/checksum": "0"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{},
			Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
						{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}}}}},
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
						{Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: "example.com/zone", Operator: corev1.NodeSelectorOpExists}}}}},
				},
				PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
					{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: matchApp, TopologyKey: "kubernetes.io/hostname",
						NamespaceSelector: &metav1.LabelSelector{}, MatchLabelKeys: []string{"pod-template-hash"}}}}},
			},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
				{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: matchApp,
					NodeAffinityPolicy: ptr.To(corev1.NodeInclusionPolicyHonor), NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyIgnore),
					MatchLabelKeys: []string{"pod-template-hash"}},
				{MaxSkew: 2, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: matchApp,
					MinDomains: ptr.To[int32](2)},
			},
			InitContainers: []corev1.Container{
				{Name: "init", Image: "registry.k8s.io/pause:3.10", Command: []string{"/pause"}, Args: []string{},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1e-3")}}},
				{Name: "sidecar", Image: "registry.k8s.io/pause:3.10", RestartPolicy: &always,
					StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}},
			},
			Containers: []corev1.Container{richContainer(), {Name: "helper", Image: "registry.k8s.io/pause:3.10",
				Env: []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: fieldRef("metadata.name")}}}}},
			Volumes: []corev1.Volume{
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("0.5Gi"))}}},
				{Name: "plain", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, DefaultMode: ptr.To[int32](0o644),
					Items: []corev1.KeyToPath{{Key: "a", Path: "a.conf", Mode: ptr.To[int32](0o400)}}, Optional: ptr.To(true)}}},
				{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o440),
					Sources: []corev1.VolumeProjection{
						{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](3600), Path: "token"}},
						{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
							{Path: "labels", FieldRef: fieldRef("metadata.labels")},
							{Path: "memory", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory",
								Divisor: resource.MustParse("1Ki")}}}}},
					}}}},
			},
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			DNSPolicy:                     corev1.DNSClusterFirst,
			DNSConfig: &corev1.PodDNSConfig{Searches: []string{"svc.example.com"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}}},
			HostAliases:                  []corev1.HostAlias{{IP: "10.0.0.1", Hostnames: []string{"db.local"}}},
			ServiceAccountName:           "default",
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](0),
				RunAsNonRoot: ptr.To(true), FSGroup: ptr.To[int64](2000), SupplementalGroups: []int64{},
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				Sysctls:             []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
					TolerationSeconds: ptr.To[int64](0)}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}},
			OS:             &corev1.PodOS{Name: corev1.Linux},
		},
	}
}

// richContainer is the main container of richPodTemplate.
func richContainer() corev1.Container {
	return corev1.Container{
		Name: "app", Image: "registry.k8s.io/pause:3.10", ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{"/pause"}, Args: []string{}, WorkingDir: "/",
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
			{Name: "grpc", ContainerPort: 9090}, {ContainerPort: 5353, Protocol: corev1.ProtocolUDP}},
		Env: []corev1.EnvVar{{Name: "MODE", Value: "e2e"}, {Name: "EMPTY"},
			{Name: "MEMORY_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
				Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "FLAG", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "flag", Optional: ptr.To(true)}}}},
		EnvFrom: []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Optional: ptr.To(true)}}},
		Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5"), corev1.ResourceMemory: resource.MustParse("1000Mi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("1e6")},
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.25"), corev1.ResourceMemory: resource.MustParse("0.5Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("1e3")}},
		ResizePolicy: []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired}},
		VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "plain", MountPath: "/plain", SubPath: "sub"},
			{Name: "config", MountPath: "/config", ReadOnly: true}, {Name: "projected", MountPath: "/projected", ReadOnly: true}},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz",
			Port: intstr.FromString("http"), HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Empty", Value: ""}}}},
			PeriodSeconds: 7, TimeoutSeconds: 2, FailureThreshold: 4, TerminationGracePeriodSeconds: ptr.To[int64](5)},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			SuccessThreshold: 2},
		StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090, Service: ptr.To("")}}},
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
			PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(false), AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
	}
}
