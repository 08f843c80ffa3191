package deploytest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/internal/testenv"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// The kustomize entry points a user applies with `kubectl apply -k`.
var entryPoints = []string{
	"manifests",
	"manifests/overlays/cert-manager",
	"manifests/overlays/log-backend",
	"manifests/overlays/slack",
	"manifests/examples/repoint-controller",
}

// Names the manifests use.
const (
	installNamespace = "kausality-system"
	proxySA          = "kausality-proxy"
	certgenSA        = "kausality-proxy-certgen"
	tlsSecret        = "kausality-proxy-tls"
	kubeconfigCMName = "kausality-proxy-kubeconfig"
	configCMName     = "kausality-proxy-config"
	serviceDNSName   = "kausality-proxy.kausality-system.svc"
	tokenFilePath    = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func kubectlBin(t *testing.T) string {
	t.Helper()
	dir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.CheckBinaries(dir, testenv.BinKubectl); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, testenv.BinKubectl)
}

// kubectl runs bin/kubectl (built from pinned modules; kustomize is built
// in) with a kubeconfig.
type kubectl struct {
	t          *testing.T
	bin        string
	kubeconfig string
	dir        string
}

func newKubectl(t *testing.T, cfg *rest.Config) *kubectl {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return kubectlWithKubeconfig(t, path)
}

func kubectlWithKubeconfig(t *testing.T, path string) *kubectl {
	return &kubectl{t: t, bin: kubectlBin(t), kubeconfig: path, dir: repoRoot(t)}
}

// try runs kubectl in the repository root and returns stdout, stderr and
// the error.
func (k *kubectl) try(stdin string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := args
	if k.kubeconfig != "" {
		full = append([]string{"--kubeconfig", k.kubeconfig}, args...)
	}
	c := exec.CommandContext(ctx, k.bin, full...)
	c.Dir = k.dir
	if stdin != "" {
		c.Stdin = strings.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	return out.String(), errOut.String(), err
}

// run runs kubectl and fails the test when it fails or warns.
func (k *kubectl) run(stdin string, args ...string) string {
	k.t.Helper()
	out, errOut, err := k.try(stdin, args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	if strings.TrimSpace(errOut) != "" {
		k.t.Fatalf("kubectl %s succeeded but wrote to stderr (warnings are failures here):\n%s", strings.Join(args, " "), errOut)
	}
	return out
}

// render builds a kustomization (a directory relative to the repository
// root) with kubectl's built-in kustomize, as `kubectl apply -k` does.
func render(t *testing.T, dir string) (string, []*unstructured.Unstructured) {
	t.Helper()
	k := &kubectl{t: t, bin: kubectlBin(t), dir: repoRoot(t)}
	out := k.run("", "kustomize", dir)
	return out, parseObjects(t, out)
}

func parseObjects(t *testing.T, data string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("parsing rendered manifests: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// find returns the one object of kind/name in objs (namespace ignored).
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if found != nil {
				t.Fatalf("two %s %s in the manifests", kind, name)
			}
			found = o
		}
	}
	if found == nil {
		t.Fatalf("no %s %s in the manifests", kind, name)
	}
	return found
}

// convert turns u into the typed object out.
func convert(t *testing.T, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s does not convert to %T (unknown or misspelled field?): %v", u.GetKind(), u.GetName(), out, err)
	}
}

func writeFile(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Shared with the other suites that run against a real control plane.
var (
	eventually = testutil.Eventually
	clientFor  = testutil.ClientFor
	mustf      = testutil.Mustf
)
