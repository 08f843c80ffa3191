package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
	"github.com/kausality-io/kausality-proxy/proxy"
)

// LocalOptions configure the local provider.
type LocalOptions struct {
	// AuditLog turns on kube-apiserver's audit log (Metadata level).
	AuditLog bool
	// ControllerManager starts kube-controller-manager through the proxy.
	ControllerManager bool
	// LogWriter receives the proxy's JSON log lines; nil means a file in the
	// work dir.
	LogWriter zapcore.WriteSyncer
	// Customize may change the proxy options before they are completed.
	Customize func(*proxy.Options)
}

// Local is the local provider: a real control plane started by the test
// harness, with kausality-proxy running in-process in front of it, reaching
// kube-apiserver through a Relay so tests can take the upstream away.
type Local struct {
	CP          *testenv.ControlPlane
	Proxy       *proxy.Server
	ProxyURL    string
	ProxyCAData []byte
	MetricsURL  string
	Relay       *Relay
	KCM         *testenv.ControllerManager
	LogPath     string
	// ConfigPath is the proxy's --config file; see SetConfig.
	ConfigPath string
	// Recorder sees every forwarded request it is told to watch.
	Recorder *Recorder
	// Watches holds back the proxy's own watch streams (WatchGate).
	Watches *WatchGate
	// Reports receives the proxy's DriftReports.
	Reports *ReportSink

	stopProxy context.CancelFunc
	proxyDone chan error
}

var _ Cluster = (*Local)(nil)

// StartLocal starts the control plane, the relay, the proxy and optionally
// kube-controller-manager through the proxy. It fails, never skips, when the
// control-plane binaries are missing.
//
//nolint:funlen // the harness's startup is one sequence of steps, each undone on failure; split, the undo order would be spread over functions
func StartLocal(ctx context.Context, opts LocalOptions) (_ *Local, retErr error) {
	cp, err := testenv.Start(ctx, testenv.Options{AuditLog: opts.AuditLog})
	if err != nil {
		return nil, err
	}
	l := &Local{CP: cp}
	defer func() {
		if retErr != nil {
			l.Stop()
		}
	}()
	// The proxy's own API is there before the proxy starts, as a
	// deployment installs it, so its policy informers sync at once.
	policyCRDs, err := PolicyCRDs()
	if err != nil {
		return nil, err
	}
	if err := InstallCRDs(ctx, cp.AdminConfig, policyCRDs...); err != nil {
		return nil, err
	}

	apiserver, err := url.Parse(cp.Host)
	if err != nil {
		return nil, err
	}
	l.Relay, err = NewRelay(apiserver.Host)
	if err != nil {
		return nil, err
	}
	// The proxy's own identity. Least privilege is the manifests' business;
	// here it only needs to impersonate and to review tokens and access.
	proxyIdentity, err := cp.AddUser("kausality-proxy", []string{"system:masters"})
	if err != nil {
		return nil, err
	}
	proxyIdentity.Host = "https://" + l.Relay.Addr()
	proxyIdentity.TLSClientConfig.ServerName = apiserver.Hostname()

	opts2 := proxy.NewOptions()
	opts2.UpstreamConfig = proxyIdentity
	opts2.ClientCAFile = cp.ClientCAFile
	opts2.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	opts2.SecureServing.Listener, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	opts2.SecureServing.ServerCert.CertDirectory = filepath.Join(cp.WorkDir, "proxy-certs")
	opts2.MetricsListener, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	opts2.UpstreamProbeInterval = 500 * time.Millisecond
	l.ConfigPath = filepath.Join(cp.WorkDir, "kausality-proxy-config.yaml")
	if err := os.WriteFile(l.ConfigPath, []byte(BaseConfig), 0o600); err != nil {
		return nil, err
	}
	opts2.ConfigFile = l.ConfigPath
	opts2.ConfigReloadInterval = 200 * time.Millisecond
	l.Recorder = &Recorder{}
	opts2.WrapUpstreamTransport = l.Recorder.Wrap
	l.Watches = NewWatchGate()
	opts2.WrapOwnTransport = l.Watches.Wrap
	if err := l.reportTo(ctx, opts2); err != nil {
		return nil, err
	}
	opts2.ShutdownTimeout = 5 * time.Second
	if opts.Customize != nil {
		opts.Customize(opts2)
	}

	sink := opts.LogWriter
	if sink == nil {
		l.LogPath = filepath.Join(cp.WorkDir, "kausality-proxy.log")
		f, err := os.Create(l.LogPath)
		if err != nil {
			return nil, err
		}
		sink = f
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), sink, zapcore.DebugLevel))

	l.Proxy, err = proxy.NewServer(opts2, log)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	l.stopProxy = cancel
	l.proxyDone = make(chan error, 1)
	go func() { l.proxyDone <- l.Proxy.Run(runCtx) }()

	l.ProxyURL = "https://" + l.Proxy.SecureAddr().String()
	l.MetricsURL = "http://" + l.Proxy.MetricsAddr().String()
	l.ProxyCAData, err = os.ReadFile(filepath.Join(opts2.SecureServing.ServerCert.CertDirectory, opts2.SecureServing.ServerCert.PairName+".crt"))
	if err != nil {
		return nil, fmt.Errorf("reading the proxy's self-signed certificate: %w", err)
	}
	if err := l.waitReady(ctx); err != nil {
		return nil, err
	}

	if opts.ControllerManager {
		l.KCM, err = cp.StartControllerManager(ctx, l.ProxyURL, l.ProxyCAData)
		if err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (l *Local) waitReady(ctx context.Context) error { return waitReady(ctx, l.MetricsURL) }

// Stop tears everything down in reverse order.
func (l *Local) Stop() {
	if l.KCM != nil {
		_ = l.KCM.Stop()
	}
	if l.stopProxy != nil {
		l.stopProxy()
		select {
		case err := <-l.proxyDone:
			_ = err // Run has logged why it ended
		case <-time.After(30 * time.Second):
		}
	}
	if l.Relay != nil {
		l.Relay.Down()
	}
	if l.Reports != nil {
		l.Reports.Close()
	}
	if l.CP != nil {
		_ = l.CP.Stop()
	}
}

// Direct implements Cluster.
func (l *Local) Direct() *rest.Config { return rest.CopyConfig(l.CP.AdminConfig) }

// ThroughProxy points cfg's credentials at the proxy.
func (l *Local) ThroughProxy(cfg *rest.Config) *rest.Config {
	return pointAt(cfg, l.ProxyURL, l.ProxyCAData)
}

// pointAt returns cfg's credentials aimed at a proxy serving url with a
// certificate signed by caData.
func pointAt(cfg *rest.Config, url string, caData []byte) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Host = url
	out.TLSClientConfig.CAData = caData
	out.TLSClientConfig.CAFile = ""
	out.TLSClientConfig.ServerName = ""
	return out
}

// UserThroughProxy implements Cluster.
func (l *Local) UserThroughProxy(name string, groups ...string) (*rest.Config, error) {
	cfg, err := l.CP.AddUser(name, groups)
	if err != nil {
		return nil, err
	}
	return l.ThroughProxy(cfg), nil
}

// ServiceAccountThroughProxy implements Cluster.
func (l *Local) ServiceAccountThroughProxy(ctx context.Context, namespace, name string) (*rest.Config, error) {
	token, err := l.CP.ServiceAccountToken(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return l.ThroughProxy(&rest.Config{BearerToken: token}), nil
}

// ProxyEndpoint implements Cluster.
func (l *Local) ProxyEndpoint() Endpoint {
	return Endpoint{URL: l.ProxyURL, CAData: append([]byte(nil), l.ProxyCAData...), MetricsURL: l.MetricsURL}
}

// ProxyLog implements Cluster.
func (l *Local) ProxyLog() ([]byte, error) {
	if l.LogPath == "" {
		return nil, errors.New("the proxy logs to LocalOptions.LogWriter, not to a file")
	}
	return os.ReadFile(l.LogPath)
}

// DriftReports implements Cluster.
func (l *Local) DriftReports(namespace, child string) ([]v1alpha1.DriftReport, error) {
	return l.Reports.For(namespace, child), nil
}

// AuditEvents implements Cluster. It needs LocalOptions.AuditLog.
func (l *Local) AuditEvents() ([]auditv1.Event, error) { return l.CP.AuditEvents() }

// ControllerManagerLog implements Cluster.
func (l *Local) ControllerManagerLog() (string, error) {
	if l.KCM == nil {
		return "", errors.New("kube-controller-manager was not started")
	}
	return l.KCM.Log()
}

// SetConfig replaces the proxy's --config file and waits until the running
// proxy has loaded it. It fails when the proxy keeps the old one.
func (l *Local) SetConfig(ctx context.Context, content string) error {
	before := l.Proxy.Interceptor().Settings()
	if err := os.WriteFile(l.ConfigPath, []byte(content), 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for l.Proxy.Interceptor().Settings() == before {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the proxy did not load the new config (invalid? see its log %s)", l.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// reportTo makes the proxy report drift to l.Reports, keeping its drift
// records in DriftNamespace, as deployed.
func (l *Local) reportTo(ctx context.Context, opts *proxy.Options) error {
	l.Reports = newReportSink()
	opts.DriftWebhookURLs = []string{l.Reports.URL()}
	opts.Drifts = DriftTimings(DriftNamespace)
	return ensureNamespace(ctx, l.CP.AdminClient(), DriftNamespace)
}

// DriftNamespace holds the local proxy's drift records and sender Lease.
const DriftNamespace = "kausality-system"

// DriftTimings are the drift options of local proxies: the sender Lease
// and the delivery backoff are short, so that tests see a new sender, and
// a receiver that comes back, within seconds.
func DriftTimings(namespace string) intercept.DriftOptions {
	return intercept.DriftOptions{Namespace: namespace, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second,
		RetryPeriod: 500 * time.Millisecond, BackoffMax: 2 * time.Second, Recheck: 2 * time.Second}
}

func ensureNamespace(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
