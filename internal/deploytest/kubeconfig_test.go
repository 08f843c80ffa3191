package deploytest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A kubeconfig printed by `kausality-proxy kubeconfig` (token-file and
// client-certificate variants), and the one in the manifests' ConfigMap,
// work with kubectl and with client-go against the proxy, which is
// installed from the manifests (its serving certificate and CA come from
// the init step). Each write shows up in the proxy's decision log under the
// caller's own identity: it went through the proxy, and the caller kept
// its identity.
func TestKubeconfigAgainstProxy(t *testing.T) {
	in := installed(t)
	ctx := context.Background()
	admin := clientFor(t, cp.AdminConfig)
	ns := "kubeconfig-" + rand.String(5)
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	mustf(t, err, "namespace")
	dir := t.TempDir()

	bind := func(subject rbacv1.Subject) {
		t.Helper()
		_, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(subject.Kind) + "-" + subject.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{subject},
		}, metav1.CreateOptions{})
		mustf(t, err, "role binding")
	}
	generate := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(proxyBinary(t), append([]string{"kubeconfig"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("kausality-proxy kubeconfig %v: %v\n%s", args, err, stderr)
		}
		return writeFile(t, filepath.Join(dir, name), out)
	}
	// use creates a ConfigMap with kubectl and one with client-go, reads
	// them back with each, and checks that the proxy decided about both
	// creates as user.
	use := func(kubeconfig, user, prefix string, kubectlArgs ...string) {
		t.Helper()
		k := kubectlWithKubeconfig(t, kubeconfig)
		base := append(append([]string{}, kubectlArgs...), "-n", ns)
		k.run("", append(base, "create", "configmap", prefix+"-kubectl", "--from-literal=by=kubectl")...)
		if got := k.run("", append(base, "get", "configmap", prefix+"-kubectl", "-o", "jsonpath={.data.by}")...); got != "kubectl" {
			t.Fatalf("kubectl get: %q", got)
		}

		c := clientFromKubeconfig(t, kubeconfig, kubectlArgs)
		_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: prefix + "-client-go"}, Data: map[string]string{"by": "client-go"}}, metav1.CreateOptions{})
		mustf(t, err, "client-go create through the proxy with %s", kubeconfig)
		list, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		mustf(t, err, "client-go list")
		names := map[string]bool{}
		for _, cm := range list.Items {
			names[cm.Name] = true
		}
		if !names[prefix+"-kubectl"] || !names[prefix+"-client-go"] {
			t.Fatalf("client-go list: %v", names)
		}
		for _, name := range []string{prefix + "-kubectl", prefix + "-client-go"} {
			if n := count(in.decisions(t, ns, "configmaps", name), user, "Allow", ""); n != 1 {
				t.Fatalf("the proxy logged %d decisions allowing %s to create configmap %s, want 1\n%s", n, user, name, in.logTail())
			}
		}
	}

	// Token file: a service account's token, read from the file.
	sa := "reporter"
	bind(rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns})
	token, err := cp.ServiceAccountToken(ctx, ns, sa)
	mustf(t, err, "token")
	tokenFile := writeFile(t, filepath.Join(dir, "token"), []byte(token))
	kc := generate("token.kubeconfig", "--server", in.proxyURL, "--ca-file", in.caFile, "--token-file", tokenFile, "--namespace", ns)
	loaded, err := clientcmd.LoadFromFile(kc)
	mustf(t, err, "load")
	if u := loaded.AuthInfos["kausality-proxy"]; u.TokenFile != tokenFile || u.Token != "" {
		t.Fatalf("token variant: user %+v", u)
	}
	use(kc, "system:serviceaccount:"+ns+":"+sa, "token")

	// Client certificate: verified by the proxy, impersonated upstream.
	bind(rbacv1.Subject{Kind: "User", Name: "carol", APIGroup: "rbac.authorization.k8s.io"})
	carol, err := cp.AddUser("carol", nil)
	mustf(t, err, "carol")
	certFile := writeFile(t, filepath.Join(dir, "carol.crt"), carol.CertData)
	keyFile := writeFile(t, filepath.Join(dir, "carol.key"), carol.KeyData)
	kc = generate("cert.kubeconfig", "--server", in.proxyURL, "--ca-file", in.caFile, "--client-cert", certFile, "--client-key", keyFile, "--namespace", ns)
	use(kc, "carol", "cert")

	// The manifests' ConfigMap, as a controller mounts it (kubeconfig and
	// the ca.crt the init step published, side by side). Only the address
	// is overridden (a test cannot resolve the Service's DNS name; the
	// certificate is still verified for it), and the token: the
	// kubeconfig's tokenFile is the pod's service-account token path.
	mount := filepath.Join(dir, "mounted")
	for k, v := range in.kubeconfigCM.Data {
		writeFile(t, filepath.Join(mount, k), []byte(v))
	}
	if in.kubeconfigCM.Data["ca.crt"] != string(in.caPEM) {
		t.Fatal("the init step did not publish the CA in the kubeconfig ConfigMap")
	}
	use(filepath.Join(mount, "kubeconfig"), "system:serviceaccount:"+ns+":"+sa, "mounted",
		"--server", in.proxyURL, "--tls-server-name", serviceDNSName, "--token", token)

	// The CA is what makes the connection trusted: a kubeconfig with
	// another CA (here kube-apiserver's) is refused.
	wrongCA := writeFile(t, filepath.Join(dir, "wrong", "ca.crt"), cp.CAData)
	kc = generate("wrong.kubeconfig", "--server", in.proxyURL, "--ca-file", wrongCA, "--token-file", tokenFile)
	_, stderr, err := kubectlWithKubeconfig(t, kc).try("", "get", "configmaps", "-n", ns)
	if err == nil || !strings.Contains(stderr, "certificate") {
		t.Fatalf("a kubeconfig with the wrong CA must fail TLS verification: %v\n%s", err, stderr)
	}
}

// clientFromKubeconfig builds a clientset the way a controller does
// (client-go's loading rules), applying the same overrides as the kubectl
// flags in args (--server, --tls-server-name, --token).
func clientFromKubeconfig(t *testing.T, path string, args []string) kubernetes.Interface {
	t.Helper()
	overrides := &clientcmd.ConfigOverrides{}
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--server":
			overrides.ClusterInfo.Server = args[i+1]
		case "--tls-server-name":
			overrides.ClusterInfo.TLSServerName = args[i+1]
		case "--token":
			overrides.AuthInfo = clientcmdapi.AuthInfo{Token: args[i+1]}
		default:
			t.Fatalf("unknown override %s", args[i])
		}
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, overrides)
	cfg, err := cc.ClientConfig()
	mustf(t, err, "client config from %s", path)
	cfg.Timeout = 30 * time.Second
	return clientFor(t, cfg)
}
