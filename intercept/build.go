package intercept

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/drifts"
	"github.com/kausality-io/kausality-proxy/intercept/escalation"
	"github.com/kausality-io/kausality-proxy/intercept/notify"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/reservations"
	"github.com/kausality-io/kausality-proxy/intercept/settlements"
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
	SlackLimits escalation.MessageLimits
	// Identity names this replica in the Lease ("" = host name and a
	// random suffix).
	Identity string
	// Timings of the sender election, the delivery backoff and the
	// periodic recheck of open drifts; zero values are the defaults.
	LeaseDuration, RenewDeadline, RetryPeriod, BackoffMax, Recheck time.Duration
}

// enabled: someone is to hear of drifts. A person reading the records
// with kubectl kausality drifts is someone: the proxy's namespace is
// enough.
func (o DriftOptions) enabled(receivers []string) bool {
	return o.Namespace != "" || len(receivers) > 0 || o.SlackChannel != ""
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
	store := objects.New(background, disc, dyn, meta)
	client, err := kubernetes.NewForConfig(o.Client)
	if err != nil {
		stop()
		return nil, fmt.Errorf("upstream client: %w", err)
	}
	ledger, slack, err := buildDrifts(o, store, dyn, client, settings)
	if err != nil {
		stop()
		return nil, err
	}
	policies := NewPolicies(dyn, o.Log.Named("approvalpolicies"))
	policies.Run(background)
	// Reservations are kept next to the drift records, in the proxy's
	// own namespace.
	reserved := reservations.New(client, o.Drifts.Namespace, replicaIdentity(o.Drifts.Identity), nil)
	// What the replicas learn of settledness lives there too: it must
	// outlive a replica and reach every other.
	settled := settlements.New(client, o.Drifts.Namespace, o.Log.Named("settledness"))
	settled.Run(background)
	i := New(Config{
		Settlements:          settled,
		Reservations:         reserved,
		ReservationOrphanAge: o.ReservationOrphanAge,
		Policies:             policies,
		Drifts:               ledger,
		Objects:              store,
		Writer:               dyn,
		Metadata:             meta,
		Settings:             settings.Current,
		DefaultMode:          annotations.DriftMode(o.DefaultMode),
		FailurePolicy:        FailurePolicy(o.FailurePolicy),
		Authorizer:           o.Authorizer,
		MaxBodyBytes:         o.MaxBodyBytes,
		Log:                  o.Log.Named("intercept"),
		Metrics:              o.Metrics,
	})
	i.watcher, i.stopBackground, i.slack = settings, stop, slack
	return i, nil
}

// buildDrifts makes the drift ledger and, with a Slack channel, the
// escalation and its interaction endpoint. No namespace and nobody to
// tell: no ledger.
func buildDrifts(o Options, store *objects.Store, dyn dynamic.Interface, client kubernetes.Interface, settings *config.Watcher) (*drifts.Ledger, *escalation.Escalator, error) {
	d := o.Drifts
	if !d.enabled(o.DriftWebhookURLs) {
		return nil, nil, nil
	}
	var receiverToken string
	if d.WebhookTokenFile != "" {
		b, err := os.ReadFile(d.WebhookTokenFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--drift-webhook-token-file: %w", err)
		}
		if receiverToken = strings.TrimSpace(string(b)); receiverToken == "" {
			return nil, nil, fmt.Errorf("--drift-webhook-token-file %s is empty", d.WebhookTokenFile)
		}
	}
	lo := drifts.Options{
		Client: client, Namespace: d.Namespace, Identity: d.Identity, Objects: store,
		Receivers: o.DriftWebhookURLs, ReceiverToken: receiverToken, Timeout: o.DriftWebhookTimeout,
		Backoff:       notify.Backoff{Max: d.BackoffMax},
		LeaseDuration: d.LeaseDuration, RenewDeadline: d.RenewDeadline, RetryPeriod: d.RetryPeriod, Recheck: d.Recheck,
		Log: o.Log, Registerer: o.Metrics,
	}
	var esc *escalation.Escalator
	if d.SlackChannel != "" {
		if d.SlackCredentialsDir == "" {
			return nil, nil, fmt.Errorf("--slack-channel needs --slack-credentials-dir: the bot token and the signing secret come from a mounted Secret")
		}
		token, secret, err := escalation.LoadCredentials(d.SlackCredentialsDir)
		if err != nil {
			return nil, nil, fmt.Errorf("--slack-credentials-dir: %w", err)
		}
		esc, err = escalation.New(escalation.Config{
			BotToken: token, SigningSecret: secret, Channel: d.SlackChannel, APIURL: d.SlackAPIURL,
			Parents: escalation.NewDynamicParentEditor(dyn, store.RESTMapper()),
			Drifts:  drifts.NewClicks(client, d.Namespace),
			ExcludedNamespaces: func() []string {
				return settings.Current().Rules.ExcludedNamespaces
			},
			Limits: d.SlackLimits,
			Log:    o.Log.Named("slack"),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("slack escalation: %w", err)
		}
		lo.Escalator = esc
	}
	ledger, err := drifts.New(lo)
	if err != nil {
		return nil, nil, fmt.Errorf("drift reports: %w", err)
	}
	return ledger, esc, nil
}

// SlackInteractions is the endpoint Slack posts button clicks to; nil
// without Slack escalation.
func (i *Interceptor) SlackInteractions() http.Handler {
	if i == nil || i.slack == nil {
		return nil
	}
	return i.slack.InteractionHandler()
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
	go i.settleOrphanedReservations(ctx)
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
	if i.slack != nil {
		// Clicks already answered 200 are applied before the process ends.
		done := make(chan struct{})
		go func() { i.slack.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	return i.cfg.Drifts.Shutdown(ctx)
}

// Settings returns the configuration in force.
func (i *Interceptor) Settings() *config.Config { return i.cfg.Settings() }

// Objects is the store the interceptor decides from.
func (i *Interceptor) Objects() *objects.Store { return i.cfg.Objects }
