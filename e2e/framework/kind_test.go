package framework

// Unit tests of the kind provider's parts that need no Docker. The kind
// path itself (StartKind with a daemon) runs only under `make e2e-kind`.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/decisionlog"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

// ---- Docker missing ----

func TestCheckDockerSaysWhy(t *testing.T) {
	ctx := context.Background()

	t.Run("no docker CLI", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		err := CheckDocker(ctx)
		if err == nil || !strings.Contains(err.Error(), "docker is not available") || !strings.Contains(err.Error(), "docker CLI is not installed") {
			t.Fatalf("CheckDocker without docker: %v", err)
		}
		// StartKind checks first and does nothing else.
		k, err2 := StartKind(ctx, KindOptions{Log: io.Discard})
		if k != nil || err2 == nil || err2.Error() != err.Error() {
			t.Fatalf("StartKind without docker: %v, %v; want %v", k, err2, err)
		}
	})

	t.Run("no daemon", func(t *testing.T) {
		dir := t.TempDir()
		script := "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?' >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", dir)
		err := CheckDocker(ctx)
		if err == nil || !strings.Contains(err.Error(), "docker is not available: 'docker info' cannot reach a daemon") ||
			!strings.Contains(err.Error(), "Cannot connect to the Docker daemon") {
			t.Fatalf("CheckDocker without a daemon: %v", err)
		}
		if _, err2 := StartKind(ctx, KindOptions{Log: io.Discard}); err2 == nil || err2.Error() != err.Error() {
			t.Fatalf("StartKind without a daemon: %v, want %v", err2, err)
		}
	})

	t.Run("docker works", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "docker"), []byte("#!/bin/sh\necho 28.0.0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", dir)
		if err := CheckDocker(ctx); err != nil {
			t.Fatalf("CheckDocker with a working docker: %v", err)
		}
	})
}

// ---- the kind cluster config ----

func TestKindClusterConfig(t *testing.T) {
	cfg := kindClusterConfig("kausality-e2e", "/tmp/x/audit-policy.yaml", 40443, 40090)
	// What kind reads: the YAML of the v1alpha4 config round-trips strictly.
	data, err := sigsyaml.Marshal(cfg)
	mustNoErr(t, err)
	var back v1alpha4.Cluster
	mustNoErr(t, sigsyaml.UnmarshalStrict(data, &back))
	if back.APIVersion != "kind.x-k8s.io/v1alpha4" || back.Kind != "Cluster" || back.Name != "kausality-e2e" || len(back.Nodes) != 1 {
		t.Fatalf("cluster %+v", back)
	}
	n := back.Nodes[0]
	if n.Role != v1alpha4.ControlPlaneRole {
		t.Errorf("role %q", n.Role)
	}
	wantPorts := map[int32]int32{kindProxyNodePort: 40443, kindMetricsNodePort: 40090}
	for _, pm := range n.ExtraPortMappings {
		if wantPorts[pm.ContainerPort] != pm.HostPort || pm.ListenAddress != "127.0.0.1" || pm.Protocol != v1alpha4.PortMappingProtocolTCP {
			t.Errorf("port mapping %+v", pm)
		}
		delete(wantPorts, pm.ContainerPort)
	}
	if len(wantPorts) != 0 {
		t.Errorf("port mappings missing for node ports %v", wantPorts)
	}
	if len(n.ExtraMounts) != 1 || n.ExtraMounts[0].HostPath != "/tmp/x/audit-policy.yaml" || n.ExtraMounts[0].ContainerPath != kindAuditPolicyPath || !n.ExtraMounts[0].Readonly {
		t.Errorf("mounts %+v", n.ExtraMounts)
	}

	// The kubeadm patches are merge patches onto kind's kubeadm v1beta3
	// config: ClusterConfiguration.apiServer.extraArgs is a map of strings
	// there, and the kubelet's settings are KubeletConfiguration fields.
	patches := map[string]map[string]any{}
	for _, p := range n.KubeadmConfigPatches {
		var m map[string]any
		mustNoErr(t, sigsyaml.Unmarshal([]byte(p), &m))
		kind, _ := m["kind"].(string)
		patches[kind] = m
	}
	cc := patches["ClusterConfiguration"]
	if cc == nil {
		t.Fatal("no ClusterConfiguration patch")
	}
	args, _, _ := unstructured.NestedMap(cc, "apiServer", "extraArgs")
	for k, v := range args {
		if _, ok := v.(string); !ok {
			t.Errorf("apiServer.extraArgs[%s] = %v (%T): kubeadm v1beta3 wants strings", k, v, v)
		}
	}
	if args["audit-policy-file"] != kindAuditPolicyPath || args["audit-log-path"] != kindAuditLogPath || args["audit-log-format"] != "json" {
		t.Errorf("audit args %v", args)
	}
	vols, _, _ := unstructured.NestedSlice(cc, "apiServer", "extraVolumes")
	mounted := map[string]bool{}
	for _, v := range vols {
		m := v.(map[string]any)
		if m["hostPath"] != m["mountPath"] || m["name"] == "" {
			t.Errorf("extra volume %v", m)
		}
		mounted[m["mountPath"].(string)] = true
	}
	if !mounted[kindAuditPolicyPath] || !mounted[filepath.Dir(kindAuditLogPath)] {
		t.Errorf("kube-apiserver does not get the audit policy and log dir: %v", mounted)
	}
	kc := patches["KubeletConfiguration"]
	if kc["syncFrequency"] != "5s" || kc["containerLogMaxSize"] != "500Mi" {
		t.Errorf("kubelet patch %v", kc)
	}

	// The audit policy is a valid Policy that logs at Metadata by default.
	var policy struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Rules      []struct {
			Level string `json:"level"`
		} `json:"rules"`
	}
	mustNoErr(t, sigsyaml.Unmarshal([]byte(kindAuditPolicy), &policy))
	if policy.APIVersion != "audit.k8s.io/v1" || policy.Kind != "Policy" || len(policy.Rules) == 0 || policy.Rules[len(policy.Rules)-1].Level != "Metadata" {
		t.Errorf("audit policy %+v", policy)
	}
}

// ---- kube-controller-manager's kubeconfig ----

// kubeadmKCMKubeconfig is shaped like kubeadm's controller-manager.conf.
func kubeadmKCMKubeconfig(t *testing.T) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kausality-e2e"] = &clientcmdapi.Cluster{
		Server:                   "https://kausality-e2e-control-plane:6443",
		CertificateAuthorityData: []byte("-----BEGIN CERTIFICATE-----\ncluster-ca\n-----END CERTIFICATE-----\n"),
	}
	cfg.AuthInfos["system:kube-controller-manager"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: []byte("kcm-cert"),
		ClientKeyData:         []byte("kcm-key"),
	}
	cfg.Contexts["system:kube-controller-manager@kausality-e2e"] = &clientcmdapi.Context{Cluster: "kausality-e2e", AuthInfo: "system:kube-controller-manager"}
	cfg.CurrentContext = "system:kube-controller-manager@kausality-e2e"
	data, err := clientcmd.Write(*cfg)
	mustNoErr(t, err)
	return data
}

func TestRepointKubeconfig(t *testing.T) {
	orig := kubeadmKCMKubeconfig(t)
	proxyCA := []byte("-----BEGIN CERTIFICATE-----\nproxy-ca\n-----END CERTIFICATE-----\n")
	out, err := repointKubeconfig(orig, "https://10.96.123.45:443", proxyCA, kindProxyServiceDNS)
	mustNoErr(t, err)

	// What client-go makes of it: the proxy's address, CA and name, the
	// same client certificate.
	rc, err := clientcmd.RESTConfigFromKubeConfig(out)
	mustNoErr(t, err)
	if rc.Host != "https://10.96.123.45:443" || !bytes.Equal(rc.CAData, proxyCA) || rc.ServerName != kindProxyServiceDNS || rc.Insecure {
		t.Errorf("repointed config: host %s CA %q serverName %q insecure %v", rc.Host, rc.CAData, rc.ServerName, rc.Insecure)
	}
	if string(rc.CertData) != "kcm-cert" || string(rc.KeyData) != "kcm-key" {
		t.Errorf("the client certificate changed: %q %q", rc.CertData, rc.KeyData)
	}
	// Idempotent: rewriting again changes nothing.
	again, err := repointKubeconfig(out, "https://10.96.123.45:443", proxyCA, kindProxyServiceDNS)
	mustNoErr(t, err)
	if !bytes.Equal(again, out) {
		t.Errorf("not idempotent:\n%s\n---\n%s", out, again)
	}

	if _, err := repointKubeconfig([]byte("apiVersion: v1\nkind: Config\n"), "https://x", proxyCA, "x"); !errors.Is(err, errNoContext) {
		t.Errorf("no current context: %v", err)
	}
	if _, err := repointKubeconfig(orig, "https://x", nil, "x"); err == nil {
		t.Error("repointing without a CA must fail")
	}
}

// ---- client certificates signed with the cluster CA ----

// kubeadmStyleCA is an RSA CA with a PKCS#1 key, as kubeadm writes
// /etc/kubernetes/pki/ca.{crt,key}.
func kubeadmStyleCA(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	ca := testpki.NewRSACA(t, "kubernetes")
	return ca.PEM, testpki.KeyPEM(t, ca.Key)
}

func TestClusterCASignsClientCerts(t *testing.T) {
	caPEM, caKeyPEM := kubeadmStyleCA(t)
	ca, err := parseClusterCA(caPEM, caKeyPEM)
	mustNoErr(t, err)
	certPEM, keyPEM, err := ca.signClientCert("alice", []string{"system:masters", "team-a"}, time.Now())
	mustNoErr(t, err)
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("the certificate and key do not pair: %v", err)
	}

	// kube-apiserver's (and the proxy's) x509 authenticator accepts it
	// with the cluster CA and reads the user and groups from it.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	auth := x509request.New(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, x509request.CommonNameUserConversion)
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	mustNoErr(t, err)
	resp, ok, err := auth.AuthenticateRequest(&http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}})
	if err != nil || !ok {
		t.Fatalf("the x509 authenticator refused the certificate: %v", err)
	}
	// (The groups are a DER SET in the certificate: their order is not kept.)
	if resp.User.GetName() != "alice" || !sets.New(resp.User.GetGroups()...).Equal(sets.New("system:masters", "team-a")) {
		t.Errorf("authenticated as %s %v", resp.User.GetName(), resp.User.GetGroups())
	}

	// Another CA's key does not go with this certificate.
	_, otherKey := kubeadmStyleCA(t)
	if _, err := parseClusterCA(caPEM, otherKey); err == nil {
		t.Error("a CA certificate with a foreign key was accepted")
	}
	if _, err := parseClusterCA(certPEM, keyPEM); err == nil {
		t.Error("a client certificate was accepted as the CA")
	}
}

// ---- reading logs ----

func TestLineSplitterAndAuditEvents(t *testing.T) {
	ev := func(id, uri string) string {
		return `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"` + id + `","stage":"ResponseComplete","requestURI":"` + uri + `","verb":"get","user":{"username":"alice"}}`
	}
	full := ev("1", "/api/v1/a") + "\n" + ev("2", "/api/v1/b") + "\n" + "not json\n" + ev("3", "/api/v1/c") + "\n"
	var s lineSplitter
	var events []eventURI
	// Fed in chunks that cut lines anywhere.
	for _, cut := range [][2]int{{0, 10}, {10, 200}, {200, 201}, {201, len(full) - 5}, {len(full) - 5, len(full)}} {
		for _, e := range appendAuditEvents(nil, s.feed([]byte(full[cut[0]:cut[1]]))) {
			events = append(events, eventURI{string(e.AuditID), e.RequestURI})
		}
	}
	want := []eventURI{{"1", "/api/v1/a"}, {"2", "/api/v1/b"}, {"3", "/api/v1/c"}}
	if !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
	if got := s.feed([]byte(`{"half":`)); got != nil || string(s.rest) != `{"half":` {
		t.Fatalf("a partial line must wait: %q rest %q", got, s.rest)
	}
}

type eventURI struct{ id, uri string }

// The decision lines and the config reload lines are read from what the
// proxy's own code logs.
func TestProxyLogParsing(t *testing.T) {
	var buf bytes.Buffer
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(&buf), zapcore.DebugLevel))

	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	mustNoErr(t, os.WriteFile(path, []byte(BaseConfig), 0o600))
	w, err := config.NewWatcher(path, time.Hour, log.Named("config"))
	mustNoErr(t, err)
	log.Info(decisionlog.Message, zap.String("decision", "Allow"), zap.String("category", "NewOrigin"), zap.String("name", "a"), zap.Bool("dryRun", false))
	mustNoErr(t, os.WriteFile(path, []byte(BaseConfig+"excludedNamespaces: [x]\n"), 0o600))
	w.Check()
	log.Info("something else", zap.String("name", "b"))
	mustNoErr(t, os.WriteFile(path, []byte(BaseConfig+"controllers:\n- name: x\n  match: {user: nobody}\n  mode: sometimes\n"), 0o600))
	w.Check()
	log.Info(decisionlog.Message, zap.String("decision", "Deny"), zap.String("category", "DriftUnapproved"), zap.String("name", "c"), zap.Bool("dryRun", true))
	// A pod log may end in a half-written line.
	buf.WriteString(`{"level":"info","msg":"kausality dec`)

	ev := scanConfigEvents(buf.Bytes())
	if ev.Reloads != 1 || len(ev.Refused) != 1 || !strings.Contains(ev.Refused[0], `must be shadow, log or enforce, not "sometimes"`) {
		t.Fatalf("config events %+v in\n%s", ev, buf.String())
	}
	lines, err := ParseDecisions(bytes.NewReader(buf.Bytes()))
	mustNoErr(t, err)
	if len(lines) != 2 || lines[0].Str("name") != "a" || lines[0].Str("category") != "NewOrigin" || lines[0].Bool("dryRun") ||
		lines[1].Str("decision") != "Deny" || !lines[1].Bool("dryRun") {
		t.Fatalf("decisions %v", lines)
	}
}

func TestParseDriftReports(t *testing.T) {
	report := func(ns, name string, phase v1alpha1.DriftReportPhase, id string) string {
		r := v1alpha1.DriftReport{APIVersion: "kausality.io/v1alpha1", Kind: "DriftReport"}
		r.Spec.ID, r.Spec.Phase = id, phase
		r.Spec.Child.Namespace, r.Spec.Child.Name = ns, name
		r.Spec.Parent.Kind, r.Spec.Parent.Name = "Deployment", "web"
		data, err := json.Marshal(r)
		mustNoErr(t, err)
		return string(data)
	}
	log := strings.Join([]string{
		"2026/01/01 00:00:00 reportsink listening on :8080",
		report("ns1", "rs", v1alpha1.PhaseDetected, "aa"),
		report("ns2", "rs", v1alpha1.PhaseDetected, "bb"),
		report("ns1", "other", v1alpha1.PhaseDetected, "cc"),
		report("ns1", "rs", v1alpha1.PhaseResolved, "aa"),
		`{"truncated":`,
	}, "\n")
	got := parseDriftReports([]byte(log), "ns1", "rs")
	if len(got) != 2 || got[0].Spec.Phase != v1alpha1.PhaseDetected || got[1].Spec.Phase != v1alpha1.PhaseResolved || got[1].Spec.ID != "aa" || got[0].Spec.Parent.Name != "web" {
		t.Fatalf("reports %+v", got)
	}
}

func TestAppendLines(t *testing.T) {
	if got := string(appendLines([]byte("a\nb"), []byte("c\n"))); got != "a\nb\nc\n" {
		t.Errorf("%q", got)
	}
	if got := string(appendLines([]byte("a\n"), []byte("c\n"))); got != "a\nc\n" {
		t.Errorf("%q", got)
	}
	if got := string(appendLines(nil, []byte("c"))); got != "c" {
		t.Errorf("%q", got)
	}
}

// ---- manifests/overlays/kind-e2e ----

func kubectlForTest(t *testing.T) string {
	t.Helper()
	dir, err := testenv.BinDir()
	mustNoErr(t, err)
	if err := testenv.CheckBinaries(dir, testenv.BinKubectl); err != nil {
		t.Fatal(err) // never skip: `make testbin` builds it
	}
	return filepath.Join(dir, testenv.BinKubectl)
}

func renderOverlay(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	root, err := testenv.RepoRoot()
	mustNoErr(t, err)
	cmd := exec.Command(kubectlForTest(t), "kustomize", dir)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		mustNoErr(t, err)
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func findObject(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			mustNoErr(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into))
			return
		}
	}
	t.Fatalf("no %s %s", kind, name)
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// The overlay the kind provider applies sets what the provider relies on,
// and keeps every arg of the base Deployment and Job.
func TestKindOverlay(t *testing.T) {
	objs := renderOverlay(t, KindOverlay)
	base := renderOverlay(t, "manifests")

	var proxy, baseProxy appsv1.Deployment
	findObject(t, objs, "Deployment", kindProxyDeployment, &proxy)
	findObject(t, base, "Deployment", kindProxyDeployment, &baseProxy)
	if proxy.Namespace != kindNamespace || proxy.Spec.Replicas == nil || *proxy.Spec.Replicas != 1 {
		t.Errorf("proxy Deployment %s/%s replicas %v, want one replica (the pod log is the decision log)", proxy.Namespace, proxy.Name, proxy.Spec.Replicas)
	}
	pc := container(t, proxy.Spec.Template.Spec, kindProxyContainer)
	if pc.Image != KindProxyImage || pc.ImagePullPolicy != corev1.PullNever {
		t.Errorf("proxy image %s %s", pc.Image, pc.ImagePullPolicy)
	}
	for _, a := range container(t, baseProxy.Spec.Template.Spec, kindProxyContainer).Args {
		if !slices.Contains(pc.Args, a) {
			t.Errorf("the overlay drops the base arg %s", a)
		}
	}
	for _, a := range []string{"--client-ca-file=" + kindClientCAMountFile, "--drift-webhook-url=" + kindSinkURL, "--config-reload-interval=1s", "--log-level=debug"} {
		if !slices.Contains(pc.Args, a) {
			t.Errorf("proxy args %v lack %s", pc.Args, a)
		}
	}
	caDir := filepath.Dir(kindClientCAMountFile)
	vol := ""
	for _, m := range pc.VolumeMounts {
		if m.MountPath == caDir {
			vol = m.Name
		}
	}
	found := false
	for _, v := range proxy.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.ConfigMap != nil && v.ConfigMap.Name == "kube-root-ca.crt" {
			found = true
		}
	}
	if vol == "" || !found {
		t.Errorf("%s is not the kube-root-ca.crt ConfigMap (mount %q)", caDir, vol)
	}
	sel := sets.New(strings.Split(kindProxySelector, ",")...)
	for k, v := range proxy.Spec.Template.Labels {
		sel.Delete(k + "=" + v)
	}
	if sel.Len() != 0 {
		t.Errorf("proxy pods lack the labels %v of kindProxySelector", sets.List(sel))
	}

	var job, baseJob batchv1.Job
	findObject(t, objs, "Job", kindCertgenJob, &job)
	findObject(t, base, "Job", kindCertgenJob, &baseJob)
	jc := job.Spec.Template.Spec.Containers[0]
	if jc.Image != KindProxyImage || jc.ImagePullPolicy != corev1.PullNever {
		t.Errorf("certgen image %s %s", jc.Image, jc.ImagePullPolicy)
	}
	for _, a := range baseJob.Spec.Template.Spec.Containers[0].Args {
		if !slices.Contains(jc.Args, a) {
			t.Errorf("the overlay drops the certgen arg %s", a)
		}
	}
	if !slices.Contains(jc.Args, "--extra-sans=localhost,127.0.0.1") {
		t.Errorf("the serving certificate is not valid for 127.0.0.1: %v", jc.Args)
	}

	var svc corev1.Service
	findObject(t, objs, "Service", kindProxyService, &svc)
	nodePorts := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		nodePorts[p.Name] = p.NodePort
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || nodePorts["https"] != kindProxyNodePort || nodePorts["metrics"] != kindMetricsNodePort {
		t.Errorf("Service %s %v", svc.Spec.Type, svc.Spec.Ports)
	}

	var cm corev1.ConfigMap
	findObject(t, objs, "ConfigMap", kindProxyConfigMap, &cm)
	if cm.Data[kindProxyConfigKey] != BaseConfig {
		t.Errorf("the proxy's config %q, want BaseConfig %q", cm.Data[kindProxyConfigKey], BaseConfig)
	}
	if _, err := config.Parse([]byte(cm.Data[kindProxyConfigKey])); err != nil {
		t.Errorf("the proxy's config: %v", err)
	}

	var role rbacv1.ClusterRole
	findObject(t, objs, "ClusterRole", kindE2EClusterRole, &role)
	if role.Labels["kausality.io/aggregate-to-kausality-proxy"] != "true" {
		t.Errorf("the e2e role is not aggregated: %v", role.Labels)
	}
	var reads, patchesWidgets bool
	for _, r := range role.Rules {
		if slices.Equal(r.APIGroups, []string{TestGroup}) && slices.Contains(r.Resources, WidgetGVR.Resource) && slices.Contains(r.Resources, GadgetGVR.Resource) && slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
			reads = true
		}
		if slices.Equal(r.APIGroups, []string{TestGroup}) && slices.Equal(r.Resources, []string{WidgetGVR.Resource}) && slices.Equal(r.Verbs, []string{"patch"}) {
			patchesWidgets = true
		}
	}
	if !reads || !patchesWidgets {
		t.Errorf("the e2e role must read widgets and gadgets and patch widgets: %+v", role.Rules)
	}

	var sink appsv1.Deployment
	findObject(t, objs, "Deployment", kindSinkDeployment, &sink)
	sc := container(t, sink.Spec.Template.Spec, "reportsink")
	if sc.Image != KindReportSinkImage || sc.ImagePullPolicy != corev1.PullNever {
		t.Errorf("sink image %s %s", sc.Image, sc.ImagePullPolicy)
	}
	var sinkSvc corev1.Service
	findObject(t, objs, "Service", kindSinkDeployment, &sinkSvc)
	if len(sinkSvc.Spec.Ports) != 1 || !strings.HasPrefix(kindSinkURL, "http://"+sinkSvc.Name+"."+kindNamespace+".svc:8080/") || sinkSvc.Spec.Ports[0].Port != 8080 {
		t.Errorf("sink Service %s %v does not serve %s", sinkSvc.Name, sinkSvc.Spec.Ports, kindSinkURL)
	}
	k, v, _ := strings.Cut(kindSinkSelector, "=")
	if sink.Spec.Template.Labels[k] != v || sinkSvc.Spec.Selector[k] != v {
		t.Errorf("sink labels %v / selector %v, want %s", sink.Spec.Template.Labels, sinkSvc.Spec.Selector, kindSinkSelector)
	}
}

// The overlay passes a server-side dry run on a real kube-apiserver
// without a warning (PodSecurity "restricted" in kausality-system
// included), like the other entry points of manifests/
// (internal/deploytest).
func TestKindOverlayServerDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := testenv.Start(ctx, testenv.Options{})
	mustNoErr(t, err)
	defer func() { _ = cp.Stop() }()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	mustNoErr(t, testenv.WriteKubeconfig(kubeconfig, cp.AdminConfig))
	root, err := testenv.RepoRoot()
	mustNoErr(t, err)
	run := func(stdin []byte, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectlForTest(t), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Dir = root
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// A dry run creates nothing, so the namespace (with its PodSecurity
	// labels) is created for real first.
	objs := renderOverlay(t, KindOverlay)
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			data, err := o.MarshalJSON()
			mustNoErr(t, err)
			run(data, "apply", "-f", "-")
		}
	}
	out := run(nil, "apply", "-k", KindOverlay, "--dry-run=server")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(objs) {
		t.Fatalf("%d result lines for %d objects:\n%s", len(lines), len(objs), out)
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, "(server dry run)") {
			t.Errorf("unexpected line %q", l)
		}
	}
}

func mustNoErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// kubeadmKCMManifest is shaped like kubeadm's
// /etc/kubernetes/manifests/kube-controller-manager.yaml.
const kubeadmKCMManifest = `apiVersion: v1
kind: Pod
metadata:
  creationTimestamp: null
  labels:
    component: kube-controller-manager
    tier: control-plane
  name: kube-controller-manager
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-controller-manager
    - --authentication-kubeconfig=/etc/kubernetes/controller-manager.conf
    - --authorization-kubeconfig=/etc/kubernetes/controller-manager.conf
    - --kubeconfig=/etc/kubernetes/controller-manager.conf
    - --leader-elect=true
    - --use-service-account-credentials=true
    image: registry.k8s.io/kube-controller-manager:v1.35.0
    imagePullPolicy: IfNotPresent
    livenessProbe:
      failureThreshold: 8
      httpGet:
        host: 127.0.0.1
        path: /healthz
        port: probe-port
        scheme: HTTPS
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
    name: kube-controller-manager
    ports:
    - containerPort: 10257
      name: probe-port
      protocol: TCP
    resources:
      requests:
        cpu: 200m
    volumeMounts:
    - mountPath: /etc/kubernetes/controller-manager.conf
      name: kubeconfig
      readOnly: true
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: /etc/kubernetes/controller-manager.conf
      type: FileOrCreate
    name: kubeconfig
status: {}
`

func TestAnnotateStaticPod(t *testing.T) {
	out, err := annotateStaticPod([]byte(kubeadmKCMManifest), "kausality.io/e2e-repointed-at", "2026-01-01T00:00:00Z")
	mustNoErr(t, err)
	var before, after corev1.Pod
	mustNoErr(t, sigsyaml.UnmarshalStrict([]byte(kubeadmKCMManifest), &before))
	mustNoErr(t, sigsyaml.UnmarshalStrict(out, &after))
	if after.Annotations["kausality.io/e2e-repointed-at"] != "2026-01-01T00:00:00Z" {
		t.Fatalf("annotations %v", after.Annotations)
	}
	after.Annotations = nil
	a, _ := json.Marshal(before)
	b, _ := json.Marshal(after)
	if !bytes.Equal(a, b) {
		t.Fatalf("the manifest changed beyond the annotation:\n%s\n%s", a, b)
	}
	if _, err := annotateStaticPod([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), "k", "v"); err == nil {
		t.Error("a ConfigMap was taken for a Pod manifest")
	}
}
