package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
)

// kubeconfigName names the cluster, user and context of a generated
// kubeconfig.
const kubeconfigName = "kausality-proxy"

// kubeconfigOptions are the flags of `kausality-proxy kubeconfig`.
type kubeconfigOptions struct {
	Server        string
	CAFile        string
	TLSServerName string
	TokenFile     string
	ClientCert    string
	ClientKey     string
	Namespace     string
	EmbedCerts    bool
}

func newKubeconfigCommand() *cobra.Command {
	o := &kubeconfigOptions{EmbedCerts: true}
	cmd := &cobra.Command{
		Use:   "kubeconfig --server URL --ca-file FILE [--token-file FILE | --client-cert FILE --client-key FILE] [--namespace NS]",
		Short: "Print a kubeconfig that points one controller at kausality-proxy",
		Long: `kubeconfig prints a kubeconfig (to standard output) for a controller that
talks to kube-apiserver through kausality-proxy. The controller keeps its own
identity: either a bearer token read from --token-file on every request (a
service account's projected token, so rotation keeps working), or a client
certificate the proxy verifies against its --client-ca-file.

In a pod, with the manifests' Service:

  kausality-proxy kubeconfig \
    --server https://kausality-proxy.kausality-system.svc \
    --ca-file ca.crt \
    --token-file /var/run/secrets/kubernetes.io/serviceaccount/token

The CA (and a client certificate and key) are embedded unless
--embed-certs=false; then the paths are written as given, and a relative
path is resolved relative to the kubeconfig file by every client-go based
client. The token file is always a path, never embedded.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := o.kubeconfig()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Server, "server", o.Server, "URL of kausality-proxy (https://HOST[:PORT]), e.g. its Service: https://kausality-proxy.kausality-system.svc.")
	fs.StringVar(&o.CAFile, "ca-file", o.CAFile, "PEM file with the CA that signed the proxy's serving certificate.")
	fs.StringVar(&o.TLSServerName, "tls-server-name", o.TLSServerName, "Server name to verify the proxy's certificate against, when it differs from the host in --server.")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "Bearer token file the client reads on every request (not embedded), e.g. /var/run/secrets/kubernetes.io/serviceaccount/token.")
	fs.StringVar(&o.ClientCert, "client-cert", o.ClientCert, "PEM client certificate, signed by a CA in the proxy's --client-ca-file. Needs --client-key.")
	fs.StringVar(&o.ClientKey, "client-key", o.ClientKey, "PEM private key of --client-cert.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Default namespace of the context.")
	fs.BoolVar(&o.EmbedCerts, "embed-certs", o.EmbedCerts, "Embed the CA, client certificate and key in the kubeconfig instead of referencing the files.")
	_ = cmd.MarkFlagRequired("server")
	_ = cmd.MarkFlagRequired("ca-file")
	return cmd
}

// validate reports every problem with the flags at once.
func (o *kubeconfigOptions) validate() error {
	var errs []error
	if o.Server == "" {
		errs = append(errs, errors.New("--server is required"))
	} else if u, err := url.Parse(o.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("--server must be an https:// URL with a host (the proxy serves TLS only), not %q", o.Server))
	}
	if o.CAFile == "" {
		errs = append(errs, errors.New("--ca-file is required: the proxy's serving certificate must be verified"))
	}
	token := o.TokenFile != ""
	cert := o.ClientCert != "" || o.ClientKey != ""
	switch {
	case token && cert:
		errs = append(errs, errors.New("give either --token-file or --client-cert/--client-key, not both"))
	case !token && !cert:
		errs = append(errs, errors.New("give --token-file or --client-cert and --client-key: the controller needs an identity"))
	case cert && (o.ClientCert == "" || o.ClientKey == ""):
		errs = append(errs, errors.New("--client-cert and --client-key go together"))
	}
	return errors.Join(errs...)
}

// kubeconfig builds the kubeconfig with clientcmd's API types and
// serializes it with clientcmd.Write.
func (o *kubeconfigOptions) kubeconfig() ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(o.CAFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	if _, err := certutil.ParseCertsPEM(caPEM); err != nil {
		return nil, fmt.Errorf("--ca-file %s: %w", o.CAFile, err)
	}

	var certPEM, keyPEM []byte
	if o.TokenFile == "" {
		if certPEM, err = os.ReadFile(o.ClientCert); err != nil {
			return nil, fmt.Errorf("--client-cert: %w", err)
		}
		if keyPEM, err = os.ReadFile(o.ClientKey); err != nil {
			return nil, fmt.Errorf("--client-key: %w", err)
		}
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return nil, fmt.Errorf("--client-cert %s and --client-key %s are not a key pair: %w", o.ClientCert, o.ClientKey, err)
		}
	}

	// Validate the embedded form: with --embed-certs=false the referenced
	// files may only exist where the controller runs (a relative path is
	// relative to the kubeconfig file), but their content was checked above.
	if err := clientcmd.Validate(*o.build(caPEM, certPEM, keyPEM, true)); err != nil {
		return nil, fmt.Errorf("generated kubeconfig is invalid: %w", err)
	}
	return clientcmd.Write(*o.build(caPEM, certPEM, keyPEM, o.EmbedCerts))
}

// build assembles the kubeconfig from clientcmd's API types.
func (o *kubeconfigOptions) build(caPEM, certPEM, keyPEM []byte, embed bool) *clientcmdapi.Config {
	cluster := clientcmdapi.NewCluster()
	cluster.Server = o.Server
	cluster.TLSServerName = o.TLSServerName
	if embed {
		cluster.CertificateAuthorityData = caPEM
	} else {
		cluster.CertificateAuthority = o.CAFile
	}

	user := clientcmdapi.NewAuthInfo()
	switch {
	case o.TokenFile != "":
		user.TokenFile = o.TokenFile
	case embed:
		user.ClientCertificateData, user.ClientKeyData = certPEM, keyPEM
	default:
		user.ClientCertificate, user.ClientKey = o.ClientCert, o.ClientKey
	}

	ctx := clientcmdapi.NewContext()
	ctx.Cluster = kubeconfigName
	ctx.AuthInfo = kubeconfigName
	ctx.Namespace = o.Namespace

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigName] = cluster
	cfg.AuthInfos[kubeconfigName] = user
	cfg.Contexts[kubeconfigName] = ctx
	cfg.CurrentContext = kubeconfigName
	return cfg
}
