package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func testCertsOptions(now time.Time) *certsOptions {
	return &certsOptions{
		Namespace: "kausality-system", Service: "kausality-proxy", Secret: "kausality-proxy-tls",
		ConfigMap: "kausality-proxy-kubeconfig", Generate: true, Validity: 365 * 24 * time.Hour,
		RenewBefore: 30 * 24 * time.Hour, WaitTimeout: 5 * time.Second, ExtraSANs: []string{"127.0.0.1", "proxy.example.com"},
		now: func() time.Time { return now },
	}
}

func kubeconfigCM() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kausality-proxy-kubeconfig", Namespace: "kausality-system"},
		Data:       map[string]string{"kubeconfig": "static"},
	}
}

func TestCertsGeneratesOnceAndPublishes(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(kubeconfigCM())
	o := testCertsOptions(time.Now())
	var log bytes.Buffer
	if err := o.run(ctx, client, &log); err != nil {
		t.Fatal(err)
	}
	s, err := client.CoreV1().Secrets("kausality-system").Get(ctx, "kausality-proxy-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Fatalf("secret type %s", s.Type)
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	for _, name := range []string{"kausality-proxy", "kausality-proxy.kausality-system", "kausality-proxy.kausality-system.svc",
		"kausality-proxy.kausality-system.svc.cluster.local", "127.0.0.1", "proxy.example.com"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("not valid for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "kubernetes.default.svc", Roots: roots}); err == nil {
		t.Error("valid for a name it must not cover")
	}
	cm, _ := client.CoreV1().ConfigMaps("kausality-system").Get(ctx, "kausality-proxy-kubeconfig", metav1.GetOptions{})
	if cm.Data["ca.crt"] != string(s.Data["ca.crt"]) || cm.Data["kubeconfig"] != "static" {
		t.Fatalf("configmap data %v", cm.Data)
	}

	// Idempotent: a second run keeps the certificate.
	log.Reset()
	if err := o.run(ctx, client, &log); err != nil {
		t.Fatal(err)
	}
	s2, _ := client.CoreV1().Secrets("kausality-system").Get(ctx, "kausality-proxy-tls", metav1.GetOptions{})
	if !bytes.Equal(s2.Data["tls.crt"], s.Data["tls.crt"]) || !strings.Contains(log.String(), "kept") || !strings.Contains(log.String(), "ca.crt is current") {
		t.Fatalf("second run changed something:\n%s", log.String())
	}

	// Close to expiry it is replaced, and the new CA is published.
	later := testCertsOptions(time.Now().Add(340 * 24 * time.Hour))
	log.Reset()
	if err := later.run(ctx, client, &log); err != nil {
		t.Fatal(err)
	}
	s3, _ := client.CoreV1().Secrets("kausality-system").Get(ctx, "kausality-proxy-tls", metav1.GetOptions{})
	cm, _ = client.CoreV1().ConfigMaps("kausality-system").Get(ctx, "kausality-proxy-kubeconfig", metav1.GetOptions{})
	if bytes.Equal(s3.Data["ca.crt"], s.Data["ca.crt"]) || cm.Data["ca.crt"] != string(s3.Data["ca.crt"]) ||
		!strings.Contains(log.String(), "within --renew-before") {
		t.Fatalf("expiring certificate not replaced and republished:\n%s", log.String())
	}
}

func TestCertsRejectsForeignOrBrokenSecrets(t *testing.T) {
	o := testCertsOptions(time.Now())
	good, err := o.generate()
	if err != nil {
		t.Fatal(err)
	}
	other := testCertsOptions(time.Now())
	other.Service = "something-else"
	other.ExtraSANs = nil
	foreign, _ := other.generate()
	for name, tc := range map[string]struct {
		data map[string][]byte
		want string
	}{
		"missing key":    {map[string][]byte{"tls.crt": good["tls.crt"], "ca.crt": good["ca.crt"]}, "has no tls.key"},
		"wrong key":      {map[string][]byte{"tls.crt": good["tls.crt"], "tls.key": foreign["tls.key"], "ca.crt": good["ca.crt"]}, "not a key pair"},
		"wrong CA":       {map[string][]byte{"tls.crt": good["tls.crt"], "tls.key": good["tls.key"], "ca.crt": foreign["ca.crt"]}, "certificate not valid for"},
		"wrong names":    {foreign, "certificate not valid for kausality-proxy"},
		"garbage CA PEM": {map[string][]byte{"tls.crt": good["tls.crt"], "tls.key": good["tls.key"], "ca.crt": []byte("x")}, "no PEM certificate"},
	} {
		if _, err := o.usable(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	if _, err := o.usable(good); err != nil {
		t.Fatalf("generated certificate not usable: %v", err)
	}
}

// With --generate=false (cert-manager) the command waits for the issuer and
// fails, saying why, when nothing usable appears.
func TestCertsWaitsForIssuer(t *testing.T) {
	client := fake.NewClientset(kubeconfigCM())
	o := testCertsOptions(time.Now())
	o.Generate = false
	o.WaitTimeout = 3 * time.Second
	var log bytes.Buffer
	err := o.run(context.Background(), client, &log)
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(log.String(), "waiting for its issuer") {
		t.Fatalf("error %v, log:\n%s", err, log.String())
	}
	data, _ := testCertsOptions(time.Now()).generate()
	_, _ = client.CoreV1().Secrets("kausality-system").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "kausality-proxy-tls", Namespace: "kausality-system"}, Type: corev1.SecretTypeTLS, Data: data,
	}, metav1.CreateOptions{})
	if err := o.run(context.Background(), client, &log); err != nil {
		t.Fatal(err)
	}
	cm, _ := client.CoreV1().ConfigMaps("kausality-system").Get(context.Background(), "kausality-proxy-kubeconfig", metav1.GetOptions{})
	if cm.Data["ca.crt"] != string(data["ca.crt"]) {
		t.Fatal("CA of the issued secret not published")
	}
}
