package deploytest

import (
	"context"
	"net"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"github.com/kausality-io/kausality-proxy/internal/testenv"
	"github.com/kausality-io/kausality-proxy/proxy"
	"github.com/kausality-io/kausality-proxy/report/escalation"
)

// certManagerCRDs are minimal stand-ins for cert-manager's CRDs (group,
// kinds, scope; any content), so that the cert-manager overlay can be
// dry-run on a cluster without cert-manager. The real CRDs' schemas are
// cert-manager's business; what is checked here is that the overlay's
// objects are accepted next to the rest of the install.
const certManagerCRDs = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: issuers.cert-manager.io
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Issuer, listKind: IssuerList, plural: issuers, singular: issuer}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.cert-manager.io
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// `kubectl apply -k DIR --dry-run=server` succeeds, without a single
// warning (deprecations, PodSecurity "restricted" violations), for every
// entry point: the default install, the cert-manager and log-backend
// overlays and the repoint example. It runs on a fresh control plane of its own, so nothing
// is applied for real before.
//
// A server-side dry run does not create anything, so namespaced objects
// can only be checked in namespaces that exist: the manifests' own
// Namespace objects are therefore created for real first (with their
// PodSecurity labels, which the dry run is then checked against). The
// cert-manager overlay needs cert-manager's CRDs; minimal ones are
// installed (certManagerCRDs).
func TestManifestsServerDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fresh, err := testenv.Start(ctx, testenv.Options{})
	mustf(t, err, "starting a fresh control plane")
	defer func() { _ = fresh.Stop() }()
	k := newKubectl(t, fresh.AdminConfig)

	k.run(certManagerCRDs, "apply", "-f", "-")
	k.run("", "wait", "--for=condition=Established", "--timeout=60s",
		"crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io")

	// What the README documents (client-side apply), then server-side
	// apply. The namespaces are created by a client-side apply; before the
	// server-side pass their last-applied annotation is removed, or kubectl
	// would try (and, in a dry run, fail) to migrate it.
	namespaces := map[string]bool{}
	for _, pass := range []struct {
		name string
		args []string
	}{
		{"client-side", []string{"--dry-run=server"}},
		{"server-side", []string{"--dry-run=server", "--server-side"}},
	} {
		if pass.name == "server-side" {
			for ns := range namespaces {
				k.run("", "annotate", "namespace", ns, "kubectl.kubernetes.io/last-applied-configuration-")
			}
		}
		for _, dir := range entryPoints {
			t.Run(pass.name+"/"+dir, func(t *testing.T) {
				k := kubectlWithKubeconfig(t, k.kubeconfig)
				_, objs := render(t, dir)
				found := false
				for _, o := range objs {
					if o.GetKind() != "Namespace" {
						continue
					}
					found = true
					if !namespaces[o.GetName()] {
						data, err := o.MarshalJSON()
						mustf(t, err, "namespace")
						k.run(string(data), "apply", "-f", "-")
						namespaces[o.GetName()] = true
					}
				}
				if !found {
					t.Fatalf("%s renders no Namespace", dir)
				}
				out := k.run("", append([]string{"apply", "-k", dir}, pass.args...)...)
				lines := strings.Split(strings.TrimSpace(out), "\n")
				if len(lines) != len(objs) {
					t.Fatalf("kubectl apply -k %s %v: %d result lines for %d objects:\n%s", dir, pass.args, len(lines), len(objs), out)
				}
				for _, l := range lines {
					if !strings.HasSuffix(l, "(server dry run)") {
						t.Fatalf("kubectl apply -k %s %v: unexpected line %q", dir, pass.args, l)
					}
				}
			})
		}
	}
}

// The rendered default install has the parts and settings the issue asks
// for, and its pieces fit together (ports, secrets, config paths, flags).
func TestManifestsShape(t *testing.T) {
	_, objs := render(t, "manifests")
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition":
			if o.GetNamespace() != "" {
				t.Errorf("cluster-scoped %s %s has a namespace", o.GetKind(), o.GetName())
			}
		default:
			if o.GetNamespace() != installNamespace {
				t.Errorf("%s %s is in namespace %q, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), installNamespace)
			}
		}
	}
	for _, want := range []struct{ kind, name string }{
		{"Namespace", installNamespace}, {"ServiceAccount", proxySA}, {"ClusterRole", "kausality-proxy"},
		{"Deployment", "kausality-proxy"}, {"Service", "kausality-proxy"}, {"PodDisruptionBudget", "kausality-proxy"},
		{"ConfigMap", kubeconfigCMName}, {"ConfigMap", configCMName}, {"Job", "kausality-proxy-certgen"},
		{"CustomResourceDefinition", "approvalpolicies.kausality.io"},
		{"CustomResourceDefinition", "clusterapprovalpolicies.kausality.io"},
	} {
		find(t, objs, want.kind, want.name)
	}

	var ns corev1.Namespace
	convert(t, find(t, objs, "Namespace", installNamespace), &ns)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace labels %v: enforce the restricted Pod Security Standard", ns.Labels)
	}

	var d appsv1.Deployment
	convert(t, find(t, objs, "Deployment", "kausality-proxy"), &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != proxySA {
		t.Errorf("service account %q", pod.ServiceAccountName)
	}
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)+len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Error("no pod anti-affinity")
	} else {
		for _, term := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			sel, err := metav1.LabelSelectorAsSelector(term.PodAffinityTerm.LabelSelector)
			mustf(t, err, "anti-affinity selector")
			if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("anti-affinity term %s does not select the proxy's own pods", term.PodAffinityTerm.TopologyKey)
			}
		}
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v is not restricted", sc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the proxy alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v is not restricted", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: requests for cpu and memory and a memory limit", c.Resources)
	}

	// The args are valid flags of the proxy, and the files and ports they
	// name are the ones the pod provides.
	opts := parseProxyArgs(t, c.Args)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["https"] != int32(opts.SecureServing.BindPort) {
		t.Errorf("container port https %d, --secure-port %d", ports["https"], opts.SecureServing.BindPort)
	}
	if !strings.HasSuffix(opts.MetricsBindAddress, ":"+strconv.Itoa(int(ports["metrics"]))) {
		t.Errorf("container port metrics %d, --metrics-bind-address %s", ports["metrics"], opts.MetricsBindAddress)
	}
	for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/livez", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "metrics" {
			t.Errorf("probe %+v, want GET %s on the metrics port", probe, want)
		}
	}
	mounts := map[string]string{} // volume -> path
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	tlsVol := volumes["tls"]
	if tlsVol.Secret == nil || tlsVol.Secret.SecretName != tlsSecret ||
		opts.SecureServing.ServerCert.CertKey.CertFile != mounts["tls"]+"/tls.crt" || opts.SecureServing.ServerCert.CertKey.KeyFile != mounts["tls"]+"/tls.key" {
		t.Errorf("serving certificate: --tls-cert-file %s, --tls-private-key-file %s, mounts %v, volume %+v",
			opts.SecureServing.ServerCert.CertKey.CertFile, opts.SecureServing.ServerCert.CertKey.KeyFile, mounts, tlsVol)
	}
	cfgVol := volumes["config"]
	cfgCM := find(t, objs, "ConfigMap", configCMName)
	cfgData, _, _ := unstructured.NestedStringMap(cfgCM.Object, "data")
	if cfgVol.ConfigMap == nil || cfgVol.ConfigMap.Name != configCMName || !strings.HasPrefix(opts.ConfigFile, mounts["config"]+"/") ||
		cfgData[strings.TrimPrefix(opts.ConfigFile, mounts["config"]+"/")] == "" {
		t.Errorf("--config %s is not a key of the mounted ConfigMap %s (mounts %v)", opts.ConfigFile, configCMName, mounts)
	}
	if d.Spec.Template.Spec.TerminationGracePeriodSeconds == nil || time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second <= opts.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds must exceed --shutdown-timeout %s", opts.ShutdownTimeout)
	}

	var pdb policyv1.PodDisruptionBudget
	convert(t, find(t, objs, "PodDisruptionBudget", "kausality-proxy"), &pdb)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	mustf(t, err, "pdb selector")
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("PDB %+v does not keep a proxy pod", pdb.Spec)
	}

	var svc corev1.Service
	convert(t, find(t, objs, "Service", "kausality-proxy"), &svc)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("service selector %v does not select the proxy pods", svc.Spec.Selector)
	}
	var https *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == "https" {
			https = &svc.Spec.Ports[i]
		}
	}
	if https == nil || https.Port != 443 || https.TargetPort.String() != "https" {
		t.Errorf("service port https %+v, want 443 -> the container's https port", https)
	}

	// The kubeconfig controllers mount: the Service, the proxy's CA (ca.crt
	// next to it), the controller's own service-account token.
	kcCM := find(t, objs, "ConfigMap", kubeconfigCMName)
	kcData, _, _ := unstructured.NestedStringMap(kcCM.Object, "data")
	kc, err := clientcmd.Load([]byte(kcData["kubeconfig"]))
	mustf(t, err, "the kubeconfig in the ConfigMap")
	ctxName := kc.CurrentContext
	cluster := kc.Clusters[kc.Contexts[ctxName].Cluster]
	user := kc.AuthInfos[kc.Contexts[ctxName].AuthInfo]
	if cluster.Server != "https://"+svc.Name+"."+svc.Namespace+".svc" || cluster.CertificateAuthority != "ca.crt" || user.TokenFile != tokenFilePath {
		t.Errorf("kubeconfig: server %q (want the Service), certificate-authority %q (want ca.crt), tokenFile %q", cluster.Server, cluster.CertificateAuthority, user.TokenFile)
	}
	if _, ok := kcData["ca.crt"]; ok {
		t.Error("the manifest must not carry ca.crt: the init step publishes it, and applying again must not overwrite it")
	}
	// It is exactly what the kubeconfig subcommand prints.
	dir := t.TempDir()
	caPEM, _, err := certutil.GenerateSelfSignedCertKey("test-ca", nil, nil)
	mustf(t, err, "a CA for the kubeconfig subcommand")
	writeFile(t, dir+"/ca.crt", caPEM)
	cmd := exec.Command(proxyBinary(t), "kubeconfig", "--server", cluster.Server, "--ca-file", "ca.crt", "--embed-certs=false", "--token-file", tokenFilePath)
	cmd.Dir = dir
	out, err := cmd.Output()
	mustf(t, err, "kausality-proxy kubeconfig")
	if string(out) != kcData["kubeconfig"] {
		t.Errorf("the ConfigMap's kubeconfig differs from the subcommand's output; regenerate it:\n--- subcommand\n%s\n--- manifest\n%s", out, kcData["kubeconfig"])
	}

	var job batchv1.Job
	convert(t, find(t, objs, "Job", "kausality-proxy-certgen"), &job)
	jc := job.Spec.Template.Spec.Containers[0]
	if jc.Image != c.Image || job.Spec.Template.Spec.ServiceAccountName != certgenSA || jc.Args[0] != "certs" {
		t.Errorf("certgen Job: image %s (proxy %s), service account %s, args %v", jc.Image, c.Image, job.Spec.Template.Spec.ServiceAccountName, jc.Args)
	}

	var crd apiextensionsv1.CustomResourceDefinition
	convert(t, find(t, objs, "CustomResourceDefinition", "approvalpolicies.kausality.io"), &crd)
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped || crd.Spec.Names.Kind != "ApprovalPolicy" {
		t.Errorf("ApprovalPolicy CRD: scope %s, kind %s", crd.Spec.Scope, crd.Spec.Names.Kind)
	}

	// cert-manager issues a certificate for the name the kubeconfig uses,
	// into the Secret the Deployment mounts.
	_, cm := render(t, "manifests/overlays/cert-manager")
	cert := find(t, cm, "Certificate", "kausality-proxy-tls")
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if secretName != tlsSecret || !slices.Contains(dnsNames, serviceDNSName) {
		t.Errorf("cert-manager Certificate: secretName %s, dnsNames %v", secretName, dnsNames)
	}
	var cmJob batchv1.Job
	convert(t, find(t, cm, "Job", "kausality-proxy-certgen"), &cmJob)
	if !slices.Contains(cmJob.Spec.Template.Spec.Containers[0].Args, "--generate=false") {
		t.Errorf("with cert-manager the certgen Job must not generate: %v", cmJob.Spec.Template.Spec.Containers[0].Args)
	}

	// The repoint example: KUBECONFIG points into the mounted ConfigMap.
	_, ex := render(t, "manifests/examples/repoint-controller")
	var ctrl appsv1.Deployment
	convert(t, find(t, ex, "Deployment", "example-controller"), &ctrl)
	var kubeconfigEnv string
	for _, e := range ctrl.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "KUBECONFIG" {
			kubeconfigEnv = e.Value
		}
	}
	var mountPath string
	for _, m := range ctrl.Spec.Template.Spec.Containers[0].VolumeMounts {
		for _, v := range ctrl.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == kubeconfigCMName {
				mountPath = m.MountPath
			}
		}
	}
	if mountPath == "" || kubeconfigEnv != mountPath+"/kubeconfig" {
		t.Errorf("repointed controller: KUBECONFIG=%q, kubeconfig ConfigMap mounted at %q", kubeconfigEnv, mountPath)
	}
}

// The log-backend overlay is the default install plus a receiver, and the
// proxy's --drift-webhook-url reaches it: Service name and port, target
// port, the receiver's --listen. The receiver's args are accepted by the
// binary itself.
func TestLogBackendOverlay(t *testing.T) {
	_, base := render(t, "manifests")
	_, objs := render(t, "manifests/overlays/log-backend")
	if len(objs) != len(base)+2 {
		t.Errorf("%d objects, want the default install's %d plus a Deployment and a Service", len(objs), len(base))
	}

	var baseProxy, proxyD, backend appsv1.Deployment
	convert(t, find(t, base, "Deployment", "kausality-proxy"), &baseProxy)
	convert(t, find(t, objs, "Deployment", "kausality-proxy"), &proxyD)
	convert(t, find(t, objs, "Deployment", "kausality-proxy-log-backend"), &backend)
	var svc corev1.Service
	convert(t, find(t, objs, "Service", "kausality-proxy-log-backend"), &svc)

	baseArgs, args := baseProxy.Spec.Template.Spec.Containers[0].Args, proxyD.Spec.Template.Spec.Containers[0].Args
	if len(args) != len(baseArgs)+2 || !slices.Equal(args[:len(baseArgs)], baseArgs) {
		t.Errorf("proxy args %v, want the base args %v, the webhook URL and its token file", args, baseArgs)
	}
	opts := parseProxyArgs(t, args)
	if len(opts.DriftWebhookURLs) != 1 {
		t.Fatalf("--drift-webhook-url %v, want the log backend only", opts.DriftWebhookURLs)
	}
	u, err := url.Parse(opts.DriftWebhookURLs[0])
	mustf(t, err, "--drift-webhook-url")
	if u.Scheme != "http" || u.Hostname() != svc.Name+"."+svc.Namespace+".svc" || u.Path != "/" {
		t.Errorf("--drift-webhook-url %s does not name the Service %s/%s", u, svc.Namespace, svc.Name)
	}
	var svcPort *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if strconv.Itoa(int(svc.Spec.Ports[i].Port)) == u.Port() {
			svcPort = &svc.Spec.Ports[i]
		}
	}
	if svcPort == nil {
		t.Fatalf("the Service has no port %s: %+v", u.Port(), svc.Spec.Ports)
	}

	pod := backend.Spec.Template.Spec
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	if !sel.Matches(labels.Set(backend.Spec.Template.Labels)) || sel.Matches(labels.Set(proxyD.Spec.Template.Labels)) {
		t.Errorf("Service selector %v must select the receiver's pods and not the proxy's", svc.Spec.Selector)
	}
	// Neither the proxy's Service, PDB nor anti-affinity may count the
	// receiver's pods as proxies.
	var proxySvc corev1.Service
	convert(t, find(t, objs, "Service", "kausality-proxy"), &proxySvc)
	var pdb policyv1.PodDisruptionBudget
	convert(t, find(t, objs, "PodDisruptionBudget", "kausality-proxy"), &pdb)
	pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	mustf(t, err, "pdb selector")
	if labels.SelectorFromSet(proxySvc.Spec.Selector).Matches(labels.Set(backend.Spec.Template.Labels)) || pdbSel.Matches(labels.Set(backend.Spec.Template.Labels)) {
		t.Error("the proxy's Service or PDB selects the receiver's pods")
	}

	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the receiver alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != proxyD.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("receiver image %s, want the proxy's %s", c.Image, proxyD.Spec.Template.Spec.Containers[0].Image)
	}
	if len(c.Args) < 2 || c.Args[0] != "backend" || c.Args[1] != "log" {
		t.Fatalf("receiver args %v, want backend log ...", c.Args)
	}
	fs := pflag.NewFlagSet("backend log", pflag.ContinueOnError)
	listen := fs.String("listen", ":8080", "")
	tokenFile := fs.String("auth-token-file", "", "")
	fs.ParseErrorsAllowlist.UnknownFlags = true
	mustf(t, fs.Parse(c.Args[2:]), "receiver args")
	// Both read the token from the same Secret, at the path each names.
	secretAt := func(spec corev1.PodSpec, file string) string {
		for _, m := range spec.Containers[0].VolumeMounts {
			if file == m.MountPath+"/token" {
				for _, v := range spec.Volumes {
					if v.Name == m.Name && v.Secret != nil {
						return v.Secret.SecretName
					}
				}
			}
		}
		return ""
	}
	sender, receiver := secretAt(proxyD.Spec.Template.Spec, opts.Drifts.WebhookTokenFile), secretAt(pod, *tokenFile)
	if sender == "" || sender != receiver {
		t.Errorf("the proxy sends the token of Secret %q (%s), the receiver wants the one of %q (%s)", sender, opts.Drifts.WebhookTokenFile, receiver, *tokenFile)
	}
	var containerPort int32
	for _, p := range c.Ports {
		if p.Name == svcPort.TargetPort.String() || p.ContainerPort == svcPort.TargetPort.IntVal {
			containerPort = p.ContainerPort
		}
	}
	if containerPort == 0 || *listen != ":"+strconv.Itoa(int(containerPort)) {
		t.Errorf("Service port %d -> %s, container ports %+v, --listen %s: they do not meet", svcPort.Port, svcPort.TargetPort.String(), c.Ports, *listen)
	}
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/healthz" || probe.HTTPGet.Port.String() != "http" {
			t.Errorf("probe %+v, want GET /healthz on the http port", probe)
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the receiver calls no API: it must not mount a service-account token")
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v is not restricted", sc)
	}

	// The binary accepts the args (flags are parsed before --help).
	out, err := exec.Command(proxyBinary(t), append(slices.Clone(c.Args), "--help")...).CombinedOutput()
	mustf(t, err, "kausality-proxy %v --help:\n%s", c.Args, out)
}

// parseProxyArgs parses args with the proxy's own flag set (plus the root
// command's --log-level), failing on any flag the proxy does not have.
func parseProxyArgs(t *testing.T, args []string) *proxy.Options {
	t.Helper()
	opts := proxy.NewOptions()
	fs := pflag.NewFlagSet("kausality-proxy", pflag.ContinueOnError)
	opts.AddFlags(fs)
	fs.String("log-level", "info", "registered by the root command")
	mustf(t, fs.Parse(args), "the Deployment's args are not valid kausality-proxy flags")
	if fs.NArg() != 0 {
		t.Fatalf("the Deployment passes positional arguments %v", fs.Args())
	}
	return opts
}

// The Slack overlay is the default install plus the escalation: the proxy
// names a channel, reads its credentials from the mounted Secret's files
// (the files the proxy looks for), serves the interaction endpoint on the
// port its Service targets, and the args are the proxy's own flags.
func TestSlackOverlay(t *testing.T) {
	_, base := render(t, "manifests")
	_, objs := render(t, "manifests/overlays/slack")
	if len(objs) != len(base)+2 {
		t.Errorf("%d objects, want the default install's %d plus a Secret and a Service", len(objs), len(base))
	}
	var baseProxy, proxyD appsv1.Deployment
	convert(t, find(t, base, "Deployment", "kausality-proxy"), &baseProxy)
	convert(t, find(t, objs, "Deployment", "kausality-proxy"), &proxyD)
	var secret corev1.Secret
	convert(t, find(t, objs, "Secret", "kausality-proxy-slack"), &secret)
	var svc corev1.Service
	convert(t, find(t, objs, "Service", "kausality-proxy-slack"), &svc)

	c := proxyD.Spec.Template.Spec.Containers[0]
	baseArgs := baseProxy.Spec.Template.Spec.Containers[0].Args
	if !slices.Equal(c.Args[:len(baseArgs)], baseArgs) {
		t.Errorf("proxy args %v, want the base args %v first", c.Args, baseArgs)
	}
	opts := parseProxyArgs(t, c.Args)
	if opts.Drifts.SlackChannel == "" || opts.Drifts.SlackCredentialsDir == "" {
		t.Fatalf("--slack-channel %q, --slack-credentials-dir %q", opts.Drifts.SlackChannel, opts.Drifts.SlackCredentialsDir)
	}
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == opts.Drifts.SlackCredentialsDir {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("nothing is mounted read-only at --slack-credentials-dir %s: %+v", opts.Drifts.SlackCredentialsDir, c.VolumeMounts)
	}
	var fromSecret bool
	for _, v := range proxyD.Spec.Template.Spec.Volumes {
		fromSecret = fromSecret || (v.Name == mount.Name && v.Secret != nil && v.Secret.SecretName == secret.Name)
	}
	if !fromSecret {
		t.Errorf("the volume %s is not the Secret %s", mount.Name, secret.Name)
	}
	for _, key := range []string{escalation.BotTokenFile, escalation.SigningSecretFile} {
		if _, ok := secret.StringData[key]; !ok {
			t.Errorf("the Secret has no %s", key)
		}
	}
	for _, a := range c.Args {
		if strings.Contains(a, "xoxb") || strings.Contains(a, secret.StringData[escalation.SigningSecretFile]) {
			t.Errorf("a credential is passed as a flag: %s", a)
		}
	}

	_, port, err := net.SplitHostPort(opts.SlackInteractionsBindAddress)
	mustf(t, err, "--slack-interactions-bind-address")
	var containerPort *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == svc.Spec.Ports[0].TargetPort.String() {
			containerPort = &c.Ports[i]
		}
	}
	if len(svc.Spec.Ports) != 1 || containerPort == nil || strconv.Itoa(int(containerPort.ContainerPort)) != port {
		t.Errorf("Service ports %+v, container ports %+v, --slack-interactions-bind-address %s: they do not meet", svc.Spec.Ports, c.Ports, opts.SlackInteractionsBindAddress)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(proxyD.Spec.Template.Labels)) {
		t.Errorf("Service selector %v does not select the proxy", svc.Spec.Selector)
	}
}
