package intercept

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/notify"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// Options are what the proxy's flags say about writes. Build makes the
// write path's own parts from them (the object caches, the --config
// watcher, the DriftReport sender), so the proxy wires one facade, not its
// parts.
type Options struct {
	// ConfigFile is --config ("" = defaults); it is polled every
	// ConfigReloadInterval.
	ConfigFile           string
	ConfigReloadInterval time.Duration
	// DriftWebhookURLs receive DriftReports, each POST bounded by
	// DriftWebhookTimeout.
	DriftWebhookURLs    []string
	DriftWebhookTimeout time.Duration
	DefaultMode         string
	FailurePolicy       string
	MaxBodyBytes        int64
	// Client holds the proxy's own credentials: informers, live reads and
	// the proxy's writes to parents use them, never a caller's.
	Client *rest.Config
	// Authorizer says whether the effective user may do what a write asks.
	Authorizer authorizer.Authorizer
	Log        *zap.Logger
	// Metrics receives the write path's and the report sender's metrics.
	Metrics prometheus.Registerer
}

// Build returns an Interceptor with its own parts. Run starts their
// background work; Shutdown ends it.
func Build(o Options) (*Interceptor, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	disc, err := discovery.NewDiscoveryClientForConfig(o.Client)
	if err != nil {
		return nil, fmt.Errorf("upstream discovery client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(o.Client)
	if err != nil {
		return nil, fmt.Errorf("upstream dynamic client: %w", err)
	}
	settings, err := config.NewWatcher(o.ConfigFile, o.ConfigReloadInterval, o.Log.Named("config"))
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	reports, err := notify.New(notify.Config{URLs: o.DriftWebhookURLs, Timeout: o.DriftWebhookTimeout,
		Log: o.Log.Named("driftreports"), Registerer: o.Metrics})
	if err != nil {
		return nil, fmt.Errorf("--drift-webhook-url: %w", err)
	}
	// Informers live as long as the interceptor, not a request.
	background, stop := context.WithCancel(context.Background())
	policies := NewPolicies(dyn, o.Log.Named("approvalpolicies"))
	policies.Run(background)
	i := New(Config{
		Policies:      policies,
		Reports:       reports,
		Objects:       objects.New(background, disc, dyn),
		Writer:        dyn,
		Settings:      settings.Current,
		DefaultMode:   annotations.DriftMode(o.DefaultMode),
		FailurePolicy: FailurePolicy(o.FailurePolicy),
		Authorizer:    o.Authorizer,
		MaxBodyBytes:  o.MaxBodyBytes,
		Log:           o.Log.Named("intercept"),
		Metrics:       o.Metrics,
	})
	i.watcher, i.stopBackground = settings, stop
	return i, nil
}

// Run starts the config watcher and the report sender; they stop when ctx
// is done.
func (i *Interceptor) Run(ctx context.Context) {
	if i == nil {
		return
	}
	if i.watcher != nil {
		go i.watcher.Run(ctx)
	}
	if i.cfg.Reports != nil {
		i.cfg.Reports.Start(ctx)
	}
}

// Shutdown delivers the queued reports within ctx and stops the caches.
func (i *Interceptor) Shutdown(ctx context.Context) error {
	if i == nil {
		return nil
	}
	defer func() {
		if i.stopBackground != nil {
			i.stopBackground()
		}
	}()
	if i.cfg.Reports != nil {
		return i.cfg.Reports.Shutdown(ctx)
	}
	return nil
}

// Settings returns the configuration in force.
func (i *Interceptor) Settings() *config.Config { return i.cfg.Settings() }
