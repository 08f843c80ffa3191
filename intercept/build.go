package intercept

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/policywatch"
	"github.com/kausality-io/kausality-proxy/intercept/reservations"
	"github.com/kausality-io/kausality-proxy/intercept/settlements"
	"github.com/kausality-io/kausality-proxy/report"
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
	// Drifts says where open drifts are kept and how people hear of them
	// besides the webhooks.
	Drifts        DriftOptions
	DefaultMode   string
	FailurePolicy string
	MaxBodyBytes  int64
	// Client holds the proxy's own credentials: informers, live reads and
	// the proxy's writes to parents use them, never a caller's.
	Client *rest.Config
	// Authorizer says whether the effective user may do what a write asks.
	Authorizer authorizer.Authorizer
	Log        *zap.Logger
	// Metrics receives the write path's and the report sender's metrics.
	Metrics prometheus.Registerer
	// ReservationOrphanAge is when a once-approval reservation whose
	// replica has not settled it is settled by another (0: the default).
	ReservationOrphanAge time.Duration
	// UnboundStatusRecordDelay: see Config.
	UnboundStatusRecordDelay time.Duration
	// RequestTimeout is the proxy's --request-timeout: no write it
	// forwards is processed longer (0: the default).
	RequestTimeout time.Duration
}

// DriftOptions configure the drift records, the election of the replica
// that sends the reports, and the Slack escalation.
type DriftOptions struct {
	// Namespace holds the drift records and the sender's Lease: the
	// proxy's own namespace.
	Namespace string
	// SlackChannel, when set, escalates each drift to this channel.
	SlackChannel string
	// SlackCredentialsDir holds the mounted Secret with the files
	// bot-token and signing-secret.
	SlackCredentialsDir string
	// WebhookTokenFile holds the bearer token sent with every DriftReport
	// ("" = none).
	WebhookTokenFile string
	// SlackAPIURL replaces Slack's API endpoint (tests).
	SlackAPIURL string
	// SlackLimits bound the drift messages; zero values are the defaults.
	SlackLimits report.MessageLimits
	// Identity names this replica in the Lease ("" = host name and a
	// random suffix).
	Identity string
	// Timings of the sender election, the delivery backoff and the
	// periodic recheck of open drifts; zero values are the defaults.
	LeaseDuration, RenewDeadline, RetryPeriod, BackoffMax, Recheck time.Duration
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
	meta, err := metadata.NewForConfig(o.Client)
	if err != nil {
		return nil, fmt.Errorf("upstream metadata client: %w", err)
	}
	settings, err := config.NewWatcher(o.ConfigFile, o.ConfigReloadInterval, o.Log.Named("config"))
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	// Informers live as long as the interceptor, not a request.
	background, stop := context.WithCancel(context.Background())
	caches, err := objects.CachesOver(o.Client)
	if err != nil {
		stop()
		return nil, err
	}
	excluded := func() []string { return settings.Current().Rules.ExcludedNamespaces }
	store := objects.New(background, disc, dyn, meta, caches, objects.ExcludingNamespaces(excluded))
	go relistOnExclusionChange(background, store, o.ConfigReloadInterval, o.Log.Named("caches"))
	client, err := kubernetes.NewForConfig(o.Client)
	if err != nil {
		stop()
		return nil, fmt.Errorf("upstream client: %w", err)
	}
	reporter, err := buildReporter(o, store, dyn, client, settings)
	if err != nil {
		stop()
		return nil, err
	}
	policies := policywatch.NewApprovals(dyn, FieldManager, o.Log.Named("approvalpolicies"))
	policies.Run(background)
	allowancePolicies := policywatch.NewAllowances(dyn, FieldManager, o.Log.Named("allowancepolicies"))
	allowancePolicies.Run(background)
	// Reservations are kept next to the drift records, in the proxy's
	// own namespace.
	reserved := reservations.New(client, o.Drifts.Namespace, replicaIdentity(o.Drifts.Identity), nil)
	// What the replicas learn of settledness lives there too: it must
	// outlive a replica and reach every other.
	settled := settlements.New(client, o.Drifts.Namespace, o.Log.Named("settledness"))
	settled.Run(background)
	i := New(Config{
		Settlements:              settled,
		Reservations:             reserved,
		ReservationOrphanAge:     o.ReservationOrphanAge,
		UnboundStatusRecordDelay: o.UnboundStatusRecordDelay,
		RequestTimeout:           o.RequestTimeout,
		Policies:                 policies,
		AllowancePolicies:        allowancePolicies,
		Drifts:                   reporter,
		Objects:                  store,
		Writer:                   dyn,
		Metadata:                 meta,
		Settings:                 settings.Current,
		DefaultMode:              annotations.DriftMode(o.DefaultMode),
		FailurePolicy:            FailurePolicy(o.FailurePolicy),
		Authorizer:               o.Authorizer,
		MaxBodyBytes:             o.MaxBodyBytes,
		Log:                      o.Log.Named("intercept"),
		Metrics:                  o.Metrics,
	})
	i.watcher, i.stopBackground = settings, stop
	unserved := registerUnservedKindsGauge(o.Metrics)
	i.kinds = &config.KindChecker{Settings: settings.Current, Mapper: store.RESTMapper, Refresh: store.RefreshDiscovery,
		Undiscovered: store.UndiscoveredGroups, Now: time.Now, Log: o.Log.Named("config"),
		Count: func(n int) { unserved.Set(float64(n)) }}
	i.kindsEvery = o.ConfigReloadInterval
	return i, nil
}

// relistOnExclusionChange makes the caches of namespaced resources follow a reload
// of the config file that changes the excluded namespaces, checking as
// often as the file is.
func relistOnExclusionChange(ctx context.Context, store *objects.Store, every time.Duration, log *zap.Logger) {
	if every <= 0 {
		every = config.DefaultReloadInterval
	}
	wait.UntilWithContext(ctx, func(context.Context) {
		if change, ok := store.RelistExcluding(); ok {
			log.Info("the caches of namespaced resources list and watch again for a change of the excluded namespaces",
				zap.Strings("excludedNamespaces", change.After), zap.Strings("before", change.Before),
				zap.Int("caches", change.Relisted))
		}
	}, every)
}

// buildReporter starts the reporting subsystem with the write path's
// caches and clients. Nobody to tell: no reporter.
func buildReporter(o Options, store *objects.Store, dyn dynamic.Interface, client kubernetes.Interface, settings *config.Watcher) (*report.Reporter, error) {
	d := o.Drifts
	return report.New(report.Config{
		Client: client, Dynamic: dyn, Objects: store,
		Namespace: d.Namespace, Identity: d.Identity,
		Receivers: o.DriftWebhookURLs, ReceiverTokenFile: d.WebhookTokenFile, Timeout: o.DriftWebhookTimeout,
		SlackChannel: d.SlackChannel, SlackCredentialsDir: d.SlackCredentialsDir, SlackAPIURL: d.SlackAPIURL, SlackLimits: d.SlackLimits,
		ExcludedNamespaces: func() []string { return settings.Current().Rules.ExcludedNamespaces },
		LeaseDuration:      d.LeaseDuration, RenewDeadline: d.RenewDeadline, RetryPeriod: d.RetryPeriod, BackoffMax: d.BackoffMax, Recheck: d.Recheck,
		Log: o.Log, Registerer: o.Metrics,
	})
}

// SlackInteractions is the endpoint Slack posts button clicks to; nil
// without Slack escalation.
func (i *Interceptor) SlackInteractions() http.Handler {
	if i == nil {
		return nil
	}
	return i.cfg.Drifts.SlackInteractions()
}

// Run starts the config watcher, the settlement of orphaned approval
// reservations and the drift ledger; they stop when ctx is done.
func (i *Interceptor) Run(ctx context.Context) {
	if i == nil {
		return
	}
	if i.watcher != nil {
		go i.watcher.Run(ctx)
	}
	if i.kinds != nil {
		every := i.kindsEvery
		if every <= 0 {
			every = config.DefaultReloadInterval
		}
		go i.kinds.Run(ctx, every)
	}
	go i.approvals.RunOrphanSettlement(ctx)
	i.cfg.Drifts.Run(ctx)
}

// replicaIdentity names this replica in the records it writes: identity,
// or the host name (the pod's name).
func replicaIdentity(identity string) string {
	if identity != "" {
		return identity
	}
	if host, err := os.Hostname(); err == nil {
		return host
	}
	return "unknown"
}

// Shutdown records the drifts taken within ctx and stops the caches.
func (i *Interceptor) Shutdown(ctx context.Context) error {
	if i == nil {
		return nil
	}
	defer func() {
		if i.stopBackground != nil {
			i.stopBackground()
		}
	}()
	return i.cfg.Drifts.Shutdown(ctx)
}

// Settings returns the configuration in force.
func (i *Interceptor) Settings() *config.Config { return i.cfg.Settings() }

// Objects is the store the interceptor decides from.
func (i *Interceptor) Objects() *objects.Store { return i.cfg.Objects }
