package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/keyutil"
)

// testPKI writes a CA and a client cert/key pair to dir.
func testPKI(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	o := &certsOptions{Namespace: "ns", Service: "svc", Validity: time.Hour, now: time.Now}
	data, err := o.generate()
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	for path, b := range map[string][]byte{ca: data["ca.crt"], cert: data["tls.crt"], key: data["tls.key"]} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}

func runKubeconfig(args ...string) (string, error) {
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"kubeconfig"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func TestKubeconfigTokenFile(t *testing.T) {
	ca, _, _ := testPKI(t, t.TempDir())
	out, err := runKubeconfig("--server", "https://kausality-proxy.kausality-system.svc", "--ca-file", ca,
		"--token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token", "--namespace", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(out))
	if err != nil {
		t.Fatalf("output is not a kubeconfig: %v\n%s", err, out)
	}
	caPEM, _ := os.ReadFile(ca)
	cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	switch {
	case cl.Server != "https://kausality-proxy.kausality-system.svc":
		t.Errorf("server %q", cl.Server)
	case !bytes.Equal(cl.CertificateAuthorityData, caPEM):
		t.Errorf("CA not embedded")
	case user.TokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" || user.Token != "":
		t.Errorf("user %+v: the token must stay a file reference", user)
	case cfg.Contexts[cfg.CurrentContext].Namespace != "team-a":
		t.Errorf("namespace %q", cfg.Contexts[cfg.CurrentContext].Namespace)
	}
}

func TestKubeconfigClientCert(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := testPKI(t, dir)
	out, err := runKubeconfig("--server", "https://127.0.0.1:8443", "--ca-file", ca, "--client-cert", cert, "--client-key", key,
		"--tls-server-name", "kausality-proxy.kausality-system.svc")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	user := cfg.AuthInfos["kausality-proxy"]
	certPEM, _ := os.ReadFile(cert)
	if !bytes.Equal(user.ClientCertificateData, certPEM) || len(user.ClientKeyData) == 0 || user.TokenFile != "" {
		t.Fatalf("client cert not embedded: %+v", user)
	}
	if cfg.Clusters["kausality-proxy"].TLSServerName != "kausality-proxy.kausality-system.svc" {
		t.Fatalf("tls-server-name lost")
	}

	// --embed-certs=false references the files as given; a relative path is
	// resolved against the kubeconfig's directory by clientcmd.
	_, err = runKubeconfig("--server", "https://127.0.0.1:8443", "--ca-file", "ca.crt", "--client-cert", "client.crt",
		"--client-key", "client.key", "--embed-certs=false")
	if err == nil {
		t.Fatal("relative files that do not exist in the working directory cannot be checked; expected an error")
	}
	t.Chdir(dir)
	out, err = runKubeconfig("--server", "https://127.0.0.1:8443", "--ca-file", "ca.crt", "--client-cert", "client.crt",
		"--client-key", "client.key", "--embed-certs=false")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "-data:") {
		t.Fatalf("--embed-certs=false embedded data:\n%s", out)
	}
	other := t.TempDir()
	path := filepath.Join(other, "kubeconfig")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	// The loading rules every client-go client uses resolve relative paths.
	loaded, err := (&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}).Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded.Clusters["kausality-proxy"].CertificateAuthority; got != filepath.Join(other, "ca.crt") {
		t.Fatalf("relative CA path resolved to %q, want it next to the kubeconfig", got)
	}
}

func TestKubeconfigValidation(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := testPKI(t, dir)
	notCA := filepath.Join(dir, "garbage")
	_ = os.WriteFile(notCA, []byte("not a certificate"), 0o600)
	otherKey := filepath.Join(dir, "other.key")
	k, _ := keyutil.MakeEllipticPrivateKeyPEM()
	_ = os.WriteFile(otherKey, k, 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ca-file", ca, "--token-file", "t"}, `"server" not set`},
		{[]string{"--server", "http://proxy", "--ca-file", ca, "--token-file", "t"}, "must be an https:// URL"},
		{[]string{"--server", "https://proxy", "--token-file", "t"}, `"ca-file" not set`},
		{[]string{"--server", "https://proxy", "--ca-file", ca}, "the controller needs an identity"},
		{[]string{"--server", "https://proxy", "--ca-file", ca, "--token-file", "t", "--client-cert", cert, "--client-key", key}, "not both"},
		{[]string{"--server", "https://proxy", "--ca-file", ca, "--client-cert", cert}, "go together"},
		{[]string{"--server", "https://proxy", "--ca-file", notCA, "--token-file", "t"}, "--ca-file " + notCA},
		{[]string{"--server", "https://proxy", "--ca-file", ca, "--client-cert", cert, "--client-key", otherKey}, "are not a key pair"},
	} {
		_, err := runKubeconfig(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("kubeconfig %v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}
