package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/proxy"
)

// ReplicaOptions configure an extra proxy replica on the local control
// plane.
type ReplicaOptions struct {
	// Name tells replicas apart (the Lease identity and the log file).
	Name string
	// Receivers get its DriftReports.
	Receivers []string
	// Drifts are its drift options (namespace, Slack); DriftTimings gives
	// short timings.
	Drifts intercept.DriftOptions
	// Config is its --config content (BaseConfig if empty).
	Config string
	// Upstream is host:port it reaches kube-apiserver at, such as a
	// Relay's address; "" is kube-apiserver's own.
	Upstream string
	// NoWaitReady returns as soon as it serves, ready or not.
	NoWaitReady bool
	// ReservationOrphanAge is its --approval-reservation-orphan-age (the
	// default if 0).
	ReservationOrphanAge time.Duration
}

// Replica is a kausality-proxy running in-process next to the main one,
// straight against kube-apiserver.
type Replica struct {
	Name       string
	URL        string
	CAData     []byte
	MetricsURL string
	// SlackURL is its Slack interaction endpoint ("" without Slack).
	SlackURL string
	LogPath  string
	server   *proxy.Server
	stop     context.CancelFunc
	done     chan error
	stopped  atomic.Bool
}

var replicaSeq atomic.Int64

// StartReplica starts a proxy replica. Stop it with Replica.Stop.
//
//nolint:funlen // one replica's startup is one sequence of steps, each undone on failure
func (l *Local) StartReplica(ctx context.Context, o ReplicaOptions) (*Replica, error) {
	if o.Name == "" {
		o.Name = fmt.Sprintf("replica-%d", replicaSeq.Add(1))
	}
	identity, err := l.CP.AddUser("kausality-proxy-"+o.Name, []string{"system:masters"})
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(l.CP.WorkDir, "replica-"+o.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if o.Upstream != "" {
		identity = rest.CopyConfig(identity)
		identity.Host = "https://" + o.Upstream
	}
	opts := proxy.NewOptions()
	opts.UpstreamConfig = identity
	opts.ClientCAFile = l.CP.ClientCAFile
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	if opts.SecureServing.Listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	opts.SecureServing.ServerCert.CertDirectory = filepath.Join(dir, "certs")
	if opts.MetricsListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	if o.Drifts.SlackChannel != "" {
		if opts.SlackInteractionsListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	opts.UpstreamProbeInterval = 500 * time.Millisecond
	config := o.Config
	if config == "" {
		config = BaseConfig
	}
	opts.ConfigFile = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(opts.ConfigFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	opts.DriftWebhookURLs = o.Receivers
	opts.Drifts = o.Drifts
	if opts.Drifts.Namespace == "" {
		opts.Drifts.Namespace = DriftNamespace
	}
	if opts.Drifts.Identity == "" {
		opts.Drifts.Identity = o.Name
	}
	opts.ShutdownTimeout = 5 * time.Second
	if o.ReservationOrphanAge != 0 {
		opts.ApprovalReservationOrphanAge = o.ReservationOrphanAge
	}

	r := &Replica{Name: o.Name, LogPath: filepath.Join(dir, "kausality-proxy.log"), done: make(chan error, 1)}
	sink, err := os.Create(r.LogPath)
	if err != nil {
		return nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), sink, zapcore.DebugLevel))
	if r.server, err = proxy.NewServer(opts, log); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.done <- r.server.Run(runCtx) }()
	r.URL = "https://" + r.server.SecureAddr().String()
	r.MetricsURL = "http://" + r.server.MetricsAddr().String()
	if a := r.server.SlackAddr(); a != nil {
		r.SlackURL = "http://" + a.String() + "/slack/interactions"
	}
	if r.CAData, err = os.ReadFile(filepath.Join(opts.SecureServing.ServerCert.CertDirectory, opts.SecureServing.ServerCert.PairName+".crt")); err != nil {
		r.Stop()
		return nil, fmt.Errorf("reading the replica's self-signed certificate: %w", err)
	}
	if o.NoWaitReady {
		return r, nil
	}
	if err := waitReady(ctx, r.MetricsURL); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// Through points cfg's credentials at the replica.
func (r *Replica) Through(cfg *rest.Config) *rest.Config { return pointAt(cfg, r.URL, r.CAData) }

// Stop shuts the replica down gracefully (it gives up its Lease).
func (r *Replica) Stop() {
	if r.stopped.Swap(true) {
		return
	}
	r.stop()
	select {
	case err := <-r.done:
		_ = err // Run has logged why it ended
	case <-time.After(30 * time.Second):
	}
}

// Log returns the replica's log.
func (r *Replica) Log() ([]byte, error) { return os.ReadFile(r.LogPath) }

func waitReady(ctx context.Context, metricsURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		resp, err := httpGet(ctx, metricsURL+"/readyz")
		if err == nil && resp == 200 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("proxy replica did not become ready: last /readyz %d, %v", resp, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
