package framework

// The parts of the kind provider that need no Docker: the cluster config,
// the kubeconfig rewrite, client certificates, and reading logs. Unit tests
// cover them (kind_test.go).

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// kindAuditPolicy logs every request at the Metadata level, as the local
// provider's does, except the traffic of the node, the scheduler and the
// apiserver itself and health probes: no scenario looks at those, and they
// would make up most of the log.
const kindAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  users: ["system:apiserver", "system:kube-scheduler"]
- level: None
  userGroups: ["system:nodes"]
- level: None
  nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version"]
- level: Metadata
`

// kindClusterConfig is the kind cluster: one control-plane node (which runs
// the workloads too) with
//   - the proxy's NodePorts mapped to 127.0.0.1:proxyPort and
//     127.0.0.1:metricsPort on the test machine;
//   - kube-apiserver's audit log (policy from auditPolicyHostFile) at
//     kindAuditLogPath;
//   - a kubelet that syncs pods every 5s (a mounted ConfigMap, the proxy's
//     --config, is updated on the pod's next sync; the default is 1m) and
//     rotates container logs only after 500Mi (the proxy's pod log is the
//     decision log the scenarios read; a rotated part is gone from the log
//     API).
func kindClusterConfig(name, auditPolicyHostFile string, proxyPort, metricsPort int32) *v1alpha4.Cluster {
	clusterConfig := fmt.Sprintf(`kind: ClusterConfiguration
apiServer:
  extraArgs:
    audit-policy-file: %[1]s
    audit-log-path: %[2]s
    audit-log-format: json
    audit-log-mode: blocking
    audit-log-maxsize: "4000"
  extraVolumes:
  - name: kausality-e2e-audit-policy
    hostPath: %[1]s
    mountPath: %[1]s
    readOnly: true
    pathType: File
  - name: kausality-e2e-audit-log
    hostPath: %[3]s
    mountPath: %[3]s
    readOnly: false
    pathType: DirectoryOrCreate
`, kindAuditPolicyPath, kindAuditLogPath, "/var/log/kubernetes")
	kubeletConfig := `kind: KubeletConfiguration
syncFrequency: 5s
containerLogMaxSize: 500Mi
`
	return &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:     name,
		Nodes: []v1alpha4.Node{{
			Role: v1alpha4.ControlPlaneRole,
			ExtraMounts: []v1alpha4.Mount{{
				HostPath:      auditPolicyHostFile,
				ContainerPath: kindAuditPolicyPath,
				Readonly:      true,
			}},
			ExtraPortMappings: []v1alpha4.PortMapping{
				{ContainerPort: kindProxyNodePort, HostPort: proxyPort, ListenAddress: "127.0.0.1", Protocol: v1alpha4.PortMappingProtocolTCP},
				{ContainerPort: kindMetricsNodePort, HostPort: metricsPort, ListenAddress: "127.0.0.1", Protocol: v1alpha4.PortMappingProtocolTCP},
			},
			KubeadmConfigPatches: []string{clusterConfig, kubeletConfig},
		}},
	}
}

// repointKubeconfig points the current context's cluster of a kubeconfig
// at server, trusting caPEM and verifying the serving certificate for
// serverName. The credentials (kube-controller-manager's client
// certificate) stay as they are.
func repointKubeconfig(data []byte, server string, caPEM []byte, serverName string) ([]byte, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || kctx == nil {
		return nil, errNoContext
	}
	cl, ok := cfg.Clusters[kctx.Cluster]
	if !ok || cl == nil {
		return nil, fmt.Errorf("the kubeconfig has no cluster %q", kctx.Cluster)
	}
	if len(caPEM) == 0 {
		return nil, errors.New("no CA for the new server")
	}
	cl.Server = server
	cl.CertificateAuthority = ""
	cl.CertificateAuthorityData = append([]byte(nil), caPEM...)
	cl.TLSServerName = serverName
	cl.InsecureSkipTLSVerify = false
	return clientcmd.Write(*cfg)
}

// annotateStaticPod sets an annotation in a static pod manifest (a Pod in
// YAML, as kubeadm writes them); everything else stays.
func annotateStaticPod(manifest []byte, key, value string) ([]byte, error) {
	var pod corev1.Pod
	if err := sigsyaml.UnmarshalStrict(manifest, &pod); err != nil {
		return nil, err
	}
	if pod.Kind != "Pod" || pod.Name == "" {
		return nil, fmt.Errorf("not a Pod manifest (kind %q, name %q)", pod.Kind, pod.Name)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[key] = value
	return sigsyaml.Marshal(&pod)
}

// parseClusterCA reads the cluster CA's certificate and key (kubeadm's
// /etc/kubernetes/pki/ca.crt and ca.key) and checks that they belong
// together.
func parseClusterCA(certPEM, keyPEM []byte) (*clusterCA, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the cluster CA certificate: %w", err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the cluster CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the cluster CA key (%T) cannot sign", key)
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(certs[0].PublicKey) {
		return nil, errors.New("the cluster CA key does not belong to its certificate")
	}
	if !certs[0].IsCA {
		return nil, errors.New("the cluster CA certificate is not a CA")
	}
	return &clusterCA{cert: certs[0], key: signer}, nil
}

// signClientCert makes a client certificate for user name in groups (CN and
// O, as kube-apiserver's x509 authenticator and the proxy read them), with
// a new ECDSA key, valid for a day (or until the CA expires).
func (ca *clusterCA) signClientCert(name string, groups []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(24 * time.Hour)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: append([]string(nil), groups...)},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// lineSplitter turns chunks of a growing file into complete lines; a
// partial last line waits for the next chunk.
type lineSplitter struct {
	rest []byte
}

func (s *lineSplitter) feed(chunk []byte) [][]byte {
	data := make([]byte, 0, len(s.rest)+len(chunk))
	data = append(append(data, s.rest...), chunk...)
	i := bytes.LastIndexByte(data, '\n')
	if i < 0 {
		s.rest = data
		return nil
	}
	s.rest = append([]byte(nil), data[i+1:]...)
	var lines [][]byte
	for _, l := range bytes.Split(data[:i], []byte{'\n'}) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines = append(lines, l)
		}
	}
	return lines
}

// appendAuditEvents decodes audit log lines (JSON, one event each); lines
// that are not events are skipped, as the local provider's reader does.
func appendAuditEvents(events []auditv1.Event, lines [][]byte) []auditv1.Event {
	for _, l := range lines {
		var ev auditv1.Event
		if err := json.Unmarshal(l, &ev); err != nil || ev.AuditID == "" {
			continue
		}
		events = append(events, ev)
	}
	return events
}

// The proxy's log messages about its --config file
// (intercept/config/watcher.go).
const (
	configReloadedMessage = "config file reloaded"
	configRefusedMessage  = "invalid config file; keeping the last good configuration"
)

// configEvents counts what the proxy logged about reloading --config.
type configEvents struct {
	// Reloads is the number of successful reloads.
	Reloads int
	// Refused holds the error of each refused file, oldest first.
	Refused []string
}

func scanConfigEvents(log []byte) configEvents {
	var ev configEvents
	s := bufio.NewScanner(bytes.NewReader(log))
	s.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for s.Scan() {
		b := s.Bytes()
		if !bytes.Contains(b, []byte("config file")) {
			continue
		}
		var line struct {
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &line) != nil {
			continue
		}
		switch line.Msg {
		case configReloadedMessage:
			ev.Reloads++
		case configRefusedMessage:
			ev.Refused = append(ev.Refused, line.Error)
		}
	}
	return ev
}

// parseDriftReports returns the reports about one child from the sink's
// log (one JSON report a line; other lines are skipped).
func parseDriftReports(log []byte, namespace, child string) []v1alpha1.DriftReport {
	var out []v1alpha1.DriftReport
	s := bufio.NewScanner(bytes.NewReader(log))
	s.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for s.Scan() {
		var r v1alpha1.DriftReport
		if json.Unmarshal(s.Bytes(), &r) != nil {
			continue
		}
		if r.Spec.Child.Namespace == namespace && r.Spec.Child.Name == child {
			out = append(out, r)
		}
	}
	return out
}
