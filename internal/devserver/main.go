// Command devserver is what `make run` starts: the proxy in front of either
// an embedded local control plane (etcd, kube-apiserver and
// kube-controller-manager from ./bin) or, with --upstream-kubeconfig, an
// existing cluster. It prints a kubeconfig for kubectl through the proxy.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/go-logr/zapr"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kausality-io/kausality-proxy/internal/testenv"
	"github.com/kausality-io/kausality-proxy/proxy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

//nolint:funlen // flag parsing and the startup of the dev server, a command's main
func run() error {
	opts := proxy.NewOptions()
	opts.SecureServing.BindPort = 6443
	opts.SecureServing.ServerCert.CertDirectory = filepath.Join(os.TempDir(), "kausality-proxy-dev", "certs")
	opts.MetricsBindAddress = "127.0.0.1:9090"
	fs := pflag.NewFlagSet("devserver", pflag.ContinueOnError)
	opts.AddFlags(fs)
	workDir := fs.String("work-dir", filepath.Join(os.TempDir(), "kausality-proxy-dev"), "Where kubeconfigs are written.")
	withKCM := fs.Bool("controller-manager", true, "With the embedded control plane, also run kube-controller-manager through the proxy.")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}

	if err := os.MkdirAll(*workDir, 0o700); err != nil {
		return err
	}
	decisionLogPath := filepath.Join(*workDir, "decisions.log")
	decisionLog, err := os.OpenFile(decisionLogPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = decisionLog.Close() }()
	// Everything, as JSON, to the file; the console gets the proxy's
	// messages and only the decisions a person needs to see.
	fileCore := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(decisionLog), zapcore.DebugLevel)
	consoleEncoder := zap.NewDevelopmentEncoderConfig()
	consoleEncoder.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05")
	consoleCore := zapcore.NewCore(zapcore.NewConsoleEncoder(consoleEncoder), zapcore.Lock(os.Stderr), zapcore.InfoLevel)
	log := zap.New(zapcore.NewTee(fileCore, newDecisionConsole(consoleCore, os.Stderr)))
	fmt.Fprintf(os.Stderr, "The console shows the proxy's messages and each decision that is not a routine Allow.\nEvery decision, as JSON: %s\n\n", decisionLogPath)
	// The k8s.io libraries log retried failures as errors every few
	// seconds; a stack trace on each would bury what they say.
	klog.SetLogger(zapr.NewLogger(log.Named("klog").WithOptions(zap.AddStacktrace(zapcore.DPanicLevel))))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var cp *testenv.ControlPlane
	if opts.UpstreamKubeconfig == "" {
		log.Info("no --upstream-kubeconfig: starting an embedded control plane from ./bin")
		// The proxy watches its own policy kinds: the embedded cluster has
		// them, as an installation from manifests/ does.
		cp, err = testenv.Start(ctx, testenv.Options{CRDDirectories: []string{filepath.Join("manifests", "base", "crds")}})
		if err != nil {
			return err
		}
		defer func() { _ = cp.Stop() }()
		opts.UpstreamConfig = cp.AdminConfig
		opts.ClientCAFile = cp.ClientCAFile
		// The open-drift records live in the proxy's namespace, which an
		// installation from manifests/ creates.
		_, err = cp.AdminClient().CoreV1().Namespaces().Create(ctx,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Drifts.Namespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the namespace %s: %w", opts.Drifts.Namespace, err)
		}
	}

	srv, err := proxy.NewServer(opts, log)
	if err != nil {
		return err
	}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Run(ctx) }()

	proxyURL := "https://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(srv.SecureAddr().(*net.TCPAddr).Port))
	caData, err := os.ReadFile(filepath.Join(opts.SecureServing.ServerCert.CertDirectory, opts.SecureServing.ServerCert.PairName+".crt"))
	if err != nil && opts.SecureServing.ServerCert.CertKey.CertFile == "" {
		return fmt.Errorf("reading the proxy's self-signed certificate: %w", err)
	}
	//nolint:nestif // the embedded control plane's optional parts
	if cp != nil {
		admin, err := cp.AddUser("dev-admin", []string{"system:masters"})
		if err != nil {
			return err
		}
		through := rest.CopyConfig(admin)
		through.Host = proxyURL
		through.CAData = caData
		through.CAFile = ""
		path := filepath.Join(*workDir, "kubeconfig")
		if err := cp.WriteKubeconfig(path, through); err != nil {
			return err
		}
		if *withKCM {
			kcm, err := cp.StartControllerManager(ctx, proxyURL, caData)
			if err != nil {
				return err
			}
			defer func() { _ = kcm.Stop() }()
			log.Info("kube-controller-manager runs through the proxy", zap.String("log", kcm.LogPath))
		}
		fmt.Printf("\nkausality-proxy is serving on %s in front of the embedded control plane.\n", proxyURL)
		fmt.Printf("Use kubectl through the proxy:\n\n  export KUBECONFIG=%s\n  kubectl get namespaces\n\n", path)
	} else {
		fmt.Printf("\nkausality-proxy is serving on %s in front of the cluster in %s.\n", proxyURL, opts.UpstreamKubeconfig)
		fmt.Printf("Point a client at it with a bearer token (its own identity is passed through), e.g.\n\n  kubectl --server %s --certificate-authority %s --token \"$TOKEN\" get ns\n\n",
			proxyURL, filepath.Join(opts.SecureServing.ServerCert.CertDirectory, opts.SecureServing.ServerCert.PairName+".crt"))
	}
	fmt.Println("Press Ctrl-C to stop.")
	return <-errCh
}
