package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig renders cfg as a kubeconfig with a single cluster, user and
// context (all named "testenv"). CA, client cert and key are inlined (files
// referenced by cfg are read); a bearer token file stays a file reference so
// that rotation keeps working.
func Kubeconfig(cfg *rest.Config) ([]byte, error) {
	if cfg == nil {
		return nil, fmt.Errorf("testenv: nil rest.Config")
	}
	const name = "testenv"
	cluster := clientcmdapi.NewCluster()
	cluster.Server = cfg.Host
	if cfg.APIPath != "" && cfg.APIPath != "/api" {
		return nil, fmt.Errorf("testenv: rest.Config APIPath %q cannot be expressed in a kubeconfig", cfg.APIPath)
	}
	cluster.InsecureSkipTLSVerify = cfg.Insecure
	cluster.TLSServerName = cfg.ServerName
	caData, err := dataOrFile(cfg.CAData, cfg.CAFile)
	if err != nil {
		return nil, err
	}
	cluster.CertificateAuthorityData = caData

	user := clientcmdapi.NewAuthInfo()
	if user.ClientCertificateData, err = dataOrFile(cfg.CertData, cfg.CertFile); err != nil {
		return nil, err
	}
	if user.ClientKeyData, err = dataOrFile(cfg.KeyData, cfg.KeyFile); err != nil {
		return nil, err
	}
	user.Token = cfg.BearerToken
	user.TokenFile = cfg.BearerTokenFile
	user.Username = cfg.Username
	user.Password = cfg.Password
	user.Impersonate = cfg.Impersonate.UserName
	user.ImpersonateUID = cfg.Impersonate.UID
	user.ImpersonateGroups = cfg.Impersonate.Groups
	user.ImpersonateUserExtra = cfg.Impersonate.Extra
	if cfg.ExecProvider != nil {
		user.Exec = cfg.ExecProvider
	}
	if cfg.AuthProvider != nil {
		user.AuthProvider = cfg.AuthProvider
	}

	ctx := clientcmdapi.NewContext()
	ctx.Cluster = name
	ctx.AuthInfo = name

	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = cluster
	kc.AuthInfos[name] = user
	kc.Contexts[name] = ctx
	kc.CurrentContext = name
	return clientcmd.Write(*kc)
}

// WriteKubeconfig writes Kubeconfig(cfg) to path (mode 0600), creating the
// parent directory.
func (cp *ControlPlane) WriteKubeconfig(path string, cfg *rest.Config) error {
	return WriteKubeconfig(path, cfg)
}

// WriteKubeconfig writes Kubeconfig(cfg) to path (mode 0600), creating the
// parent directory.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	data, err := Kubeconfig(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

func dataOrFile(data []byte, file string) ([]byte, error) {
	if len(data) > 0 || file == "" {
		return data, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("testenv: reading %s: %w", file, err)
	}
	return b, nil
}

func clientConfigFromFile(path string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", path)
}
