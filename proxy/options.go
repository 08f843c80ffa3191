package proxy

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kausality-io/kausality-proxy/authn"
	"github.com/kausality-io/kausality-proxy/intercept"
)

// Options are what the command line (or a test) says. They are turned into a
// Config by Config(), completed by Complete() and run by Server.Run, in the
// Options → Config → Complete → Run shape of kcp's front-proxy.
type Options struct {
	SecureServing *genericoptions.SecureServingOptions

	// UpstreamKubeconfig is the kubeconfig with the proxy's own credentials.
	// Empty means in-cluster config.
	UpstreamKubeconfig string
	// UpstreamConfig, when set (tests, make run), is used instead of
	// UpstreamKubeconfig.
	UpstreamConfig *rest.Config

	ClientCAFile   string
	AllowAnonymous bool

	TokenCacheTTL        time.Duration
	TokenCacheFailureTTL time.Duration
	AuthorizeCacheTTL    time.Duration
	UnauthorizeCacheTTL  time.Duration

	DefaultMode   string
	FailurePolicy string
	ConfigFile    string
	// ConfigReloadInterval is how often --config is checked for changes.
	ConfigReloadInterval time.Duration

	// DriftWebhookURLs receive DriftReports; DriftWebhookTimeout bounds
	// each delivery attempt.
	DriftWebhookURLs    []string
	DriftWebhookTimeout time.Duration
	// Drifts: where open drifts are kept (the proxy's namespace) and the
	// Slack escalation.
	Drifts intercept.DriftOptions
	// ApprovalReservationOrphanAge is when a once approval reserved by a
	// replica that has not settled it (it died mid-write) is settled by
	// another replica.
	ApprovalReservationOrphanAge time.Duration
	// UnboundStatusRecordDelay is how long after a status write that names
	// no resourceVersion the generation it is credited with is recorded
	// (kausality.io/observedGeneration, for kinds that report none).
	UnboundStatusRecordDelay time.Duration
	// SlackInteractionsBindAddress serves the endpoint Slack posts button
	// clicks to (plain HTTP, behind the ingress that terminates TLS).
	SlackInteractionsBindAddress string
	// SlackInteractionsListener, when set, is used instead.
	SlackInteractionsListener net.Listener

	MetricsBindAddress string
	// MetricsListener, when set, is used instead of MetricsBindAddress.
	MetricsListener net.Listener

	RequestTimeout      time.Duration
	ShutdownTimeout     time.Duration
	MaxRequestBodyBytes int64
	// MaxMutatingRequestsInFlight bounds concurrent mutating requests.
	MaxMutatingRequestsInFlight int
	// WrapUpstreamTransport, when set, wraps the transport of forwarded
	// (non-upgrade) requests, for instrumentation and tests that need to see
	// exactly what reaches kube-apiserver.
	WrapUpstreamTransport func(http.RoundTripper) http.RoundTripper
	// WrapOwnTransport, when set, wraps the transport of the proxy's own
	// requests (informers, live reads, its writes to parents), for
	// instrumentation and for harnesses that hold its caches back
	// deterministically.
	WrapOwnTransport func(http.RoundTripper) http.RoundTripper
	// UpstreamProbeInterval is how often the upstream's /readyz is probed to
	// answer our own /readyz.
	UpstreamProbeInterval time.Duration
}

// NewOptions returns the defaults a production deployment starts from.
func NewOptions() *Options {
	serving := genericoptions.NewSecureServingOptions()
	serving.BindPort = 8443
	serving.ServerCert.PairName = "kausality-proxy"
	serving.ServerCert.CertDirectory = "/var/run/kausality-proxy/certs"
	return &Options{
		SecureServing:        serving,
		TokenCacheTTL:        authn.DefaultTokenCacheTTL,
		TokenCacheFailureTTL: authn.DefaultTokenCacheFailureTTL,
		AuthorizeCacheTTL:    authn.DefaultAuthorizedTTL,
		UnauthorizeCacheTTL:  authn.DefaultUnauthorizedTTL,
		DefaultMode:          "log",
		FailurePolicy:        "Fail",
		MetricsBindAddress:   ":9090",
		RequestTimeout:       60 * time.Second,
		ShutdownTimeout:      60 * time.Second,
		MaxRequestBodyBytes:  3 * 1024 * 1024,
		// kube-apiserver's default for --max-mutating-requests-inflight.
		MaxMutatingRequestsInFlight:  200,
		UpstreamProbeInterval:        2 * time.Second,
		ConfigReloadInterval:         2 * time.Second,
		DriftWebhookTimeout:          10 * time.Second,
		ApprovalReservationOrphanAge: intercept.DefaultReservationOrphanAge,
		UnboundStatusRecordDelay:     intercept.DefaultUnboundStatusRecordDelay,
		Drifts:                       intercept.DriftOptions{Namespace: defaultNamespace()},
		SlackInteractionsBindAddress: ":8090",
	}
}

// AddFlags registers the proxy's flags, named after kube-apiserver's where
// they mean the same, plus the kube-standard serving flags that come with
// SecureServingOptions.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	fs.StringVar(&o.UpstreamKubeconfig, "upstream-kubeconfig", o.UpstreamKubeconfig,
		"Kubeconfig holding the proxy's own credentials for kube-apiserver. Empty means in-cluster config.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile,
		"PEM bundle of CAs that sign client certificates. Callers presenting a certificate signed by one of them are impersonated upstream. Reloaded when the file changes.")
	fs.BoolVar(&o.AllowAnonymous, "anonymous-auth", o.AllowAnonymous,
		"Let unauthenticated requests through as system:anonymous. Off by default: they get 401 and nothing is sent upstream.")
	fs.DurationVar(&o.TokenCacheTTL, "token-cache-ttl", o.TokenCacheTTL, "How long a successful TokenReview is cached.")
	fs.DurationVar(&o.TokenCacheFailureTTL, "token-cache-failure-ttl", o.TokenCacheFailureTTL, "How long a failed TokenReview is cached.")
	fs.DurationVar(&o.AuthorizeCacheTTL, "authorization-cache-ttl", o.AuthorizeCacheTTL, "How long an allowed SubjectAccessReview (impersonation, and the write path's check that a caller may write) is cached.")
	fs.DurationVar(&o.UnauthorizeCacheTTL, "authorization-failure-cache-ttl", o.UnauthorizeCacheTTL, "How long a denied SubjectAccessReview is cached.")
	fs.StringVar(&o.DefaultMode, "default-mode", o.DefaultMode, "Drift mode when nothing more specific is set: log or enforce.")
	fs.StringVar(&o.FailurePolicy, "failure-policy", o.FailurePolicy, "What to do with an intercepted write whose parent cannot be read: Fail or Ignore.")
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "YAML file with resource rules, excluded namespaces and per-controller modes. Reloaded on change.")
	fs.DurationVar(&o.ConfigReloadInterval, "config-reload-interval", o.ConfigReloadInterval, "How often --config is checked for changes.")
	fs.StringSliceVar(&o.DriftWebhookURLs, "drift-webhook-url", o.DriftWebhookURLs, "Endpoint that receives DriftReports (kausality.io/v1alpha1) as JSON POSTs; repeatable. Delivery is asynchronous with a bounded queue and retries, and never blocks a write.")
	fs.DurationVar(&o.DriftWebhookTimeout, "drift-webhook-timeout", o.DriftWebhookTimeout, "Timeout of one DriftReport delivery attempt.")
	fs.StringVar(&o.Drifts.WebhookTokenFile, "drift-webhook-token-file", o.Drifts.WebhookTokenFile,
		"File holding a bearer token sent (Authorization: Bearer) with every DriftReport, e.g. the --auth-token-file of kausality-proxy backend log. Read at start.")
	fs.StringVar(&o.Drifts.Namespace, "drift-namespace", o.Drifts.Namespace,
		"Namespace of the open-drift records and of the once-approval reservation records (ConfigMaps), and of the Lease that elects the one replica sending DriftReports. Default: $POD_NAMESPACE, else kausality-system.")
	fs.DurationVar(&o.ApprovalReservationOrphanAge, "approval-reservation-orphan-age", o.ApprovalReservationOrphanAge,
		"When a once approval reserved for a write by a replica that has not settled it (it died mid-write) is settled by another replica, from what kube-apiserver stores. An approval never goes back before its write can no longer land (10s past --request-timeout, which the write carries as its timeout), whatever this age. At least 30s.")
	fs.DurationVar(&o.UnboundStatusRecordDelay, "unbound-status-record-delay", o.UnboundStatusRecordDelay,
		"For kinds that report no observed generation (kausality.io/observedGeneration is recorded for them): how long after a status write that names no resourceVersion the generation it landed on is recorded. Its writer may have read the object before its latest spec change, and recording at once would refuse that controller's writes for the change as drift. 0 records at once; at most 1h. A kind's own delay in the --config file (unboundStatusRecordDelays) takes precedence.")
	fs.StringVar(&o.Drifts.SlackChannel, "slack-channel", o.Drifts.SlackChannel, "Slack channel each drift is escalated to, with Approve, Reject and Snooze buttons. Empty: no Slack.")
	fs.StringVar(&o.Drifts.SlackCredentialsDir, "slack-credentials-dir", o.Drifts.SlackCredentialsDir,
		"Directory of the mounted Secret holding the Slack files bot-token and signing-secret (never flags).")
	fs.StringVar(&o.SlackInteractionsBindAddress, "slack-interactions-bind-address", o.SlackInteractionsBindAddress,
		"Address of the Slack interaction endpoint (plain HTTP, POST /slack/interactions), served only with --slack-channel. Requests must carry Slack's signature.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address for /metrics, /healthz, /readyz and /livez (plain HTTP).")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "Upper bound for requests that are not long-running (watch, exec, attach, port-forward, logs and proxy are exempt), their request body included: a body that has not arrived by then is cut off with a 504.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long in-flight requests may drain on shutdown.")
	fs.Int64Var(&o.MaxRequestBodyBytes, "max-request-body-bytes", o.MaxRequestBodyBytes, "Largest body of an intercepted write; larger ones get 413.")
	fs.IntVar(&o.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", o.MaxMutatingRequestsInFlight,
		"Most mutating requests served at once; beyond it they get 429 with Retry-After. 0 means no limit.")
}

// Validate reports every problem at once.
func (o *Options) Validate() []error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	if o.SecureServing.BindPort == 0 && o.SecureServing.Listener == nil {
		errs = append(errs, fmt.Errorf("--secure-port must be set: the proxy only serves TLS"))
	}
	switch o.DefaultMode {
	case "log", "enforce":
	default:
		errs = append(errs, fmt.Errorf("--default-mode must be log or enforce, not %q", o.DefaultMode))
	}
	switch o.FailurePolicy {
	case "Fail", "Ignore":
	default:
		errs = append(errs, fmt.Errorf("--failure-policy must be Fail or Ignore, not %q", o.FailurePolicy))
	}
	if o.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--request-timeout must be positive"))
	}
	if o.MaxMutatingRequestsInFlight < 0 {
		errs = append(errs, fmt.Errorf("--max-mutating-requests-inflight must not be negative"))
	}
	if o.MaxRequestBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("--max-request-body-bytes must be positive"))
	}
	if o.UnboundStatusRecordDelay < 0 || o.UnboundStatusRecordDelay > intercept.MaxUnboundStatusRecordDelay {
		errs = append(errs, fmt.Errorf("--unbound-status-record-delay must be between 0s and %s, not %s: until a record lands, its parent's controller writes pass as carrying out its spec",
			intercept.MaxUnboundStatusRecordDelay, o.UnboundStatusRecordDelay))
	}
	if o.ApprovalReservationOrphanAge < 30*time.Second {
		errs = append(errs, fmt.Errorf("--approval-reservation-orphan-age must be at least 30s, not %s: every replica looks for orphaned reservations a third of it apart", o.ApprovalReservationOrphanAge))
	}
	if bad := validation.IsDNS1123Label(o.Drifts.Namespace); len(bad) > 0 {
		errs = append(errs, fmt.Errorf("--drift-namespace %q is not a namespace name: %s", o.Drifts.Namespace, strings.Join(bad, "; ")))
	}
	if o.MetricsBindAddress == "" && o.MetricsListener == nil {
		errs = append(errs, fmt.Errorf("--metrics-bind-address must be set: probes need /readyz"))
	}
	return errs
}

func (o *Options) upstreamRESTConfig() (*rest.Config, error) {
	if o.UpstreamConfig != nil {
		return rest.CopyConfig(o.UpstreamConfig), nil
	}
	if o.UpstreamKubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --upstream-kubeconfig given and not running in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.UpstreamKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading --upstream-kubeconfig %s: %w", o.UpstreamKubeconfig, err)
	}
	return cfg, nil
}

// defaultNamespace is the namespace the proxy runs in, from the downward
// API's POD_NAMESPACE, else the manifests' namespace.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "kausality-system"
}
