package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/keyutil"
)

// Keys of the serving-certificate Secret (a kubernetes.io/tls Secret, as
// cert-manager writes it) and of the kubeconfig ConfigMap.
const (
	certsCAKey        = "ca.crt"
	certsFieldManager = "kausality-proxy-certs"
)

// certsOptions are the flags of `kausality-proxy certs`.
type certsOptions struct {
	Kubeconfig  string
	Namespace   string
	Service     string
	Secret      string
	ConfigMap   string
	Generate    bool
	ExtraSANs   []string
	Validity    time.Duration
	RenewBefore time.Duration
	WaitTimeout time.Duration
	// now is the clock (tests).
	now func() time.Time
}

func newCertsCommand() *cobra.Command {
	o := &certsOptions{
		Namespace:   "kausality-system",
		Service:     "kausality-proxy",
		Secret:      "kausality-proxy-tls",
		ConfigMap:   "kausality-proxy-kubeconfig",
		Generate:    true,
		Validity:    10 * 365 * 24 * time.Hour,
		RenewBefore: 30 * 24 * time.Hour,
		WaitTimeout: 5 * time.Minute,
		now:         time.Now,
	}
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make sure the proxy's serving certificate exists and publish its CA (the manifests' init Job)",
		Long: `certs is the init step of the manifests (the kausality-proxy-certgen Job). It

 1. makes sure the kubernetes.io/tls Secret --secret holds a serving
    certificate for the Service --service (SERVICE, SERVICE.NAMESPACE,
    SERVICE.NAMESPACE.svc, SERVICE.NAMESPACE.svc.cluster.local and
    --extra-sans) that is valid for at least --renew-before more. If not, and
    --generate is set, it creates a new self-signed CA and a certificate
    signed by it (ECDSA P-256, valid for --validity) and stores tls.crt,
    tls.key and ca.crt. With --generate=false it waits up to --wait-timeout
    for someone else (cert-manager) to write such a Secret.
 2. publishes the CA as the key ca.crt of the ConfigMap --configmap, next to
    the kubeconfig that controllers mount, so the kubeconfig trusts the
    proxy.

It is idempotent: a valid Secret and an up-to-date ConfigMap are left alone.
It needs get/create/update on that Secret and get/patch on that ConfigMap,
nothing else.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.restConfig()
			if err != nil {
				return err
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), client, cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig to use. Empty means in-cluster config.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the Service, the Secret and the ConfigMap.")
	fs.StringVar(&o.Service, "service", o.Service, "Name of the proxy's Service; its DNS names go into the certificate.")
	fs.StringVar(&o.Secret, "secret", o.Secret, "Name of the kubernetes.io/tls Secret the proxy serves with.")
	fs.StringVar(&o.ConfigMap, "configmap", o.ConfigMap, "Name of the kubeconfig ConfigMap that receives the CA as ca.crt.")
	fs.BoolVar(&o.Generate, "generate", o.Generate, "Generate a self-signed CA and serving certificate when the Secret is missing, invalid or expiring. false: wait for another issuer (cert-manager).")
	fs.StringSliceVar(&o.ExtraSANs, "extra-sans", o.ExtraSANs, "More DNS names or IP addresses for the serving certificate.")
	fs.DurationVar(&o.Validity, "validity", o.Validity, "Lifetime of a generated CA and certificate.")
	fs.DurationVar(&o.RenewBefore, "renew-before", o.RenewBefore, "Replace a certificate that expires within this time.")
	fs.DurationVar(&o.WaitTimeout, "wait-timeout", o.WaitTimeout, "How long to wait for the Secret with --generate=false, or for the ConfigMap.")
	return cmd
}

func (o *certsOptions) restConfig() (*rest.Config, error) {
	if o.Kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
	}
	return cfg, nil
}

// hosts are the DNS names and IPs the serving certificate must cover.
func (o *certsOptions) hosts() (dns []string, ips []net.IP) {
	svc, ns := o.Service, o.Namespace
	dns = []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
	for _, s := range o.ExtraSANs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, s)
		}
	}
	return dns, ips
}

func (o *certsOptions) run(ctx context.Context, client kubernetes.Interface, log io.Writer) error {
	if o.now == nil {
		o.now = time.Now
	}
	if o.Namespace == "" || o.Service == "" || o.Secret == "" || o.ConfigMap == "" {
		return errors.New("--namespace, --service, --secret and --configmap must not be empty")
	}
	ctx, cancel := context.WithTimeout(ctx, o.WaitTimeout)
	defer cancel()
	ca, err := o.ensureSecret(ctx, client, log)
	if err != nil {
		return err
	}
	return o.publishCA(ctx, client, ca, log)
}

// ensureSecret returns the CA of a usable serving certificate, creating or
// replacing the Secret when allowed.
func (o *certsOptions) ensureSecret(ctx context.Context, client kubernetes.Interface, log io.Writer) ([]byte, error) {
	secrets := client.CoreV1().Secrets(o.Namespace)
	ref := o.Namespace + "/" + o.Secret
	var lastProblem error
	for {
		s, err := secrets.Get(ctx, o.Secret, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			s, lastProblem = nil, fmt.Errorf("secret %s does not exist", ref)
		case err != nil:
			return nil, fmt.Errorf("reading secret %s: %w", ref, err)
		default:
			notAfter, problem := o.usable(s.Data)
			if problem == nil {
				fmt.Fprintf(log, "secret %s: serving certificate is valid until %s, kept\n", ref, notAfter.UTC().Format(time.RFC3339))
				return s.Data[certsCAKey], nil
			}
			lastProblem = fmt.Errorf("secret %s: %w", ref, problem)
		}

		if !o.Generate {
			fmt.Fprintf(log, "%v; waiting for its issuer (--generate=false)\n", lastProblem)
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w (waited %s for it to be fixed)", lastProblem, o.WaitTimeout)
			case <-time.After(2 * time.Second):
			}
			continue
		}

		data, err := o.generate()
		if err != nil {
			return nil, err
		}
		if s == nil {
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: o.Secret, Namespace: o.Namespace, Labels: certsLabels()},
				Type:       corev1.SecretTypeTLS,
				Data:       data,
			}, metav1.CreateOptions{FieldManager: certsFieldManager})
			if apierrors.IsAlreadyExists(err) {
				continue // another run was faster: use its certificate
			}
			if err != nil {
				return nil, fmt.Errorf("creating secret %s: %w", ref, err)
			}
			fmt.Fprintf(log, "secret %s: created a self-signed CA and serving certificate\n", ref)
			return data[certsCAKey], nil
		}
		if s.Type != corev1.SecretTypeTLS {
			return nil, fmt.Errorf("%v, and it is of type %s, not %s: delete it to let a new one be generated", lastProblem, s.Type, corev1.SecretTypeTLS)
		}
		s.Data = data
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		for k, v := range certsLabels() {
			s.Labels[k] = v
		}
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: certsFieldManager})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("replacing secret %s: %w", ref, err)
		}
		fmt.Fprintf(log, "%v; replaced it with a new self-signed CA and serving certificate\n", lastProblem)
		return data[certsCAKey], nil
	}
}

func certsLabels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "kausality-proxy",
		"app.kubernetes.io/managed-by": certsFieldManager,
	}
}

// usable checks that data holds a serving certificate, its key and the CA
// that signed it, that the certificate covers every host and that it does
// not expire within RenewBefore.
func (o *certsOptions) usable(data map[string][]byte) (time.Time, error) {
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, certsCAKey} {
		if len(data[k]) == 0 {
			return time.Time{}, fmt.Errorf("has no %s", k)
		}
	}
	pair, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return time.Time{}, fmt.Errorf("tls.crt and tls.key are not a key pair: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return time.Time{}, fmt.Errorf("tls.crt: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data[certsCAKey]) {
		return time.Time{}, errors.New("ca.crt holds no PEM certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range pair.Certificate[1:] {
		if ic, err := x509.ParseCertificate(c); err == nil {
			inter.AddCert(ic)
		}
	}
	now := o.now()
	dns, ips := o.hosts()
	names := dns
	for _, ip := range ips {
		names = append(names, ip.String())
	}
	for _, name := range names {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return time.Time{}, fmt.Errorf("certificate not valid for %s: %w", name, err)
		}
	}
	if leaf.NotAfter.Before(now.Add(o.RenewBefore)) {
		return time.Time{}, fmt.Errorf("certificate expires at %s, within --renew-before %s", leaf.NotAfter.UTC().Format(time.RFC3339), o.RenewBefore)
	}
	return leaf.NotAfter, nil
}

// generate makes a self-signed CA and a serving certificate it signs.
func (o *certsOptions) generate() (map[string][]byte, error) {
	now := o.now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s-ca@%d", o.Service, now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(o.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	dns, ips := o.hosts()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: o.Service + "." + o.Namespace + ".svc"},
		DNSNames:     dns,
		IPAddresses:  ips,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(o.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		corev1.TLSPrivateKeyKey: keyPEM,
		certsCAKey:              pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}, nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n.Add(n, big.NewInt(1))
}

// publishCA writes ca into the kubeconfig ConfigMap's ca.crt, next to the
// kubeconfig (whose certificate-authority is the relative path ca.crt). The
// ConfigMap itself comes from the manifests; it is waited for, not created.
func (o *certsOptions) publishCA(ctx context.Context, client kubernetes.Interface, ca []byte, log io.Writer) error {
	cms := client.CoreV1().ConfigMaps(o.Namespace)
	ref := o.Namespace + "/" + o.ConfigMap
	for {
		cm, err := cms.Get(ctx, o.ConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(log, "configmap %s does not exist yet (it is part of the manifests); waiting\n", ref)
			select {
			case <-ctx.Done():
				return fmt.Errorf("configmap %s not found (waited %s): apply the manifests first", ref, o.WaitTimeout)
			case <-time.After(2 * time.Second):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("reading configmap %s: %w", ref, err)
		}
		if bytes.Equal([]byte(cm.Data[certsCAKey]), ca) {
			fmt.Fprintf(log, "configmap %s: ca.crt is current\n", ref)
			return nil
		}
		patch, err := json.Marshal(map[string]any{"data": map[string]string{certsCAKey: string(ca)}})
		if err != nil {
			return err
		}
		if _, err := cms.Patch(ctx, o.ConfigMap, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: certsFieldManager}); err != nil {
			return fmt.Errorf("publishing ca.crt in configmap %s: %w", ref, err)
		}
		fmt.Fprintf(log, "configmap %s: published ca.crt\n", ref)
		return nil
	}
}
