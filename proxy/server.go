package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/authn"
	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/internal/proxynamespace"
)

// Config is everything the server needs, resolved from Options.
type Config struct {
	Serving         *server.SecureServingInfo
	ClientCA        dynamiccertificates.CAContentProvider
	Upstream        *rest.Config
	Authenticator   *authn.Authenticator
	Interceptor     *intercept.Interceptor
	Log             *zap.Logger
	MetricsListener net.Listener
	// SlackListener serves the Slack interaction endpoint; nil without
	// Slack escalation.
	SlackListener net.Listener

	RequestTimeout        time.Duration
	ShutdownTimeout       time.Duration
	UpstreamProbeInterval time.Duration
	// MaxMutatingInFlight bounds concurrent mutating requests; 0 is no
	// limit.
	MaxMutatingInFlight int

	// WrapUpstreamTransport wraps the forwarding transport (see Options).
	WrapUpstreamTransport func(http.RoundTripper) http.RoundTripper
	// Namespace watches the proxy's own namespace for readiness; nil: no
	// records are kept, nothing to wait for.
	Namespace *proxynamespace.Probe

	metrics *metrics
}

// completedConfig is a Config whose defaults Complete has filled in.
type completedConfig struct{ *Config }

// CompletedConfig can only be made by Complete: its one field is private, so
// New never sees a half-filled Config.
type CompletedConfig struct{ *completedConfig }

// Config resolves the options: it opens listeners, loads or generates the
// serving certificate and builds the authenticators. It does not start
// anything.
func (o *Options) Config(log *zap.Logger) (*Config, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", []string{"kausality-proxy"}, []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}); err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	cfg := &Config{
		Log:                   log,
		RequestTimeout:        o.RequestTimeout,
		MaxMutatingInFlight:   o.MaxMutatingRequestsInFlight,
		ShutdownTimeout:       o.ShutdownTimeout,
		UpstreamProbeInterval: o.UpstreamProbeInterval,
		WrapUpstreamTransport: o.WrapUpstreamTransport,
	}
	if err := o.SecureServing.ApplyTo(&cfg.Serving); err != nil {
		return nil, fmt.Errorf("secure serving: %w", err)
	}
	if o.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		cfg.ClientCA = ca
		cfg.Serving.ClientCA = ca
	}

	upstream, err := o.upstreamRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.Upstream = upstream
	// The proxy's own clients (reviews, informers, parent writes) serve many
	// callers at once; client-go's default 5 QPS would throttle them.
	own := rest.CopyConfig(upstream)
	own.QPS, own.Burst = 200, 400
	own.UserAgent = "kausality-proxy"
	if o.WrapOwnTransport != nil {
		own.Wrap(o.WrapOwnTransport)
	}
	client, err := kubernetes.NewForConfig(own)
	if err != nil {
		return nil, fmt.Errorf("upstream client: %w", err)
	}
	cfg.Authenticator, err = authn.New(authn.Config{
		ClientCA:             cfg.ClientCA,
		TokenReviews:         client.AuthenticationV1().TokenReviews(),
		TokenCacheTTL:        o.TokenCacheTTL,
		TokenCacheFailureTTL: o.TokenCacheFailureTTL,
		AllowAnonymous:       o.AllowAnonymous,
		SubjectAccessReviews: client.AuthorizationV1().SubjectAccessReviews(),
		AuthorizedTTL:        o.AuthorizeCacheTTL,
		UnauthorizedTTL:      o.UnauthorizeCacheTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("authentication: %w", err)
	}

	cfg.Namespace = proxynamespace.NewProbe(client.CoreV1().Namespaces(), o.Drifts.Namespace, o.UpstreamProbeInterval, log.Named("namespace"))
	cfg.metrics = newMetrics()
	cfg.Interceptor, err = intercept.Build(intercept.Options{
		ConfigFile:               o.ConfigFile,
		ConfigReloadInterval:     o.ConfigReloadInterval,
		DriftWebhookURLs:         o.DriftWebhookURLs,
		DriftWebhookTimeout:      o.DriftWebhookTimeout,
		Drifts:                   o.Drifts,
		ReservationOrphanAge:     o.ApprovalReservationOrphanAge,
		UnboundStatusRecordDelay: o.UnboundStatusRecordDelay,
		RequestTimeout:           o.RequestTimeout,
		DefaultMode:              o.DefaultMode,
		FailurePolicy:            o.FailurePolicy,
		MaxBodyBytes:             o.MaxRequestBodyBytes,
		Client:                   own,
		Authorizer:               cfg.Authenticator.Authorizer(),
		Log:                      log,
		Metrics:                  cfg.metrics.registry,
	})
	if err != nil {
		return nil, err
	}

	if cfg.Interceptor.SlackInteractions() != nil {
		cfg.SlackListener = o.SlackInteractionsListener
		if cfg.SlackListener == nil {
			if cfg.SlackListener, err = net.Listen("tcp", o.SlackInteractionsBindAddress); err != nil {
				return nil, fmt.Errorf("--slack-interactions-bind-address: %w", err)
			}
		}
	}
	cfg.MetricsListener = o.MetricsListener
	if cfg.MetricsListener == nil {
		cfg.MetricsListener, err = net.Listen("tcp", o.MetricsBindAddress)
		if err != nil {
			return nil, fmt.Errorf("--metrics-bind-address: %w", err)
		}
	}
	return cfg, nil
}

// Complete fills in defaults that depend on other fields.
func (c *Config) Complete() CompletedConfig {
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Interceptor == nil {
		c.Interceptor = intercept.New(intercept.Config{})
	}
	if c.metrics == nil {
		c.metrics = newMetrics()
	}
	if c.UpstreamProbeInterval <= 0 {
		c.UpstreamProbeInterval = 2 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 60 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 60 * time.Second
	}
	return CompletedConfig{&completedConfig{c}}
}

// Server is a running (or runnable) kausality-proxy.
type Server struct {
	serving         *server.SecureServingInfo
	metricsListener net.Listener
	slackListener   net.Listener
	log             *zap.Logger

	upstream      *upstream
	authenticator *authn.Authenticator
	interceptor   *intercept.Interceptor
	metrics       *metrics
	probe         *upstreamProbe
	namespace     *proxynamespace.Probe
	requestInfo   *request.RequestInfoFactory
	longRunning   request.LongRunningRequestCheck
	// clock is what the filters time requests and set deadlines by.
	clock clock.PassiveClock

	requestTimeout      time.Duration
	maxMutatingInFlight int
	shutdownTimeout     time.Duration
	shuttingDown        atomic.Bool
	// drainCtx is cancelled when shutdown starts; long-running requests
	// end then.
	drainCtx   context.Context
	startDrain context.CancelFunc
}

// NewServer resolves opts, completes the config and builds the server.
func NewServer(opts *Options, log *zap.Logger) (*Server, error) {
	cfg, err := opts.Config(log)
	if err != nil {
		return nil, err
	}
	return cfg.Complete().New()
}

// New builds the server from a completed config.
func (c CompletedConfig) New() (*Server, error) {
	up, err := newUpstream(c.Upstream, c.Log, c.WrapUpstreamTransport)
	if err != nil {
		return nil, err
	}
	probeClient, err := rest.HTTPClientFor(c.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream probe client: %w", err)
	}
	m := c.metrics
	drainCtx, startDrain := context.WithCancel(context.Background())
	return &Server{
		drainCtx:            drainCtx,
		startDrain:          startDrain,
		serving:             c.Serving,
		metricsListener:     c.MetricsListener,
		slackListener:       c.SlackListener,
		log:                 c.Log,
		upstream:            up,
		authenticator:       c.Authenticator,
		interceptor:         c.Interceptor,
		metrics:             m,
		probe:               newUpstreamProbe(probeClient, up.url.JoinPath("readyz").String(), c.UpstreamProbeInterval, c.Log, m),
		namespace:           c.Namespace,
		requestInfo:         newRequestInfoFactory(),
		longRunning:         newLongRunningCheck(),
		clock:               clock.RealClock{},
		requestTimeout:      c.RequestTimeout,
		maxMutatingInFlight: c.MaxMutatingInFlight,
		shutdownTimeout:     c.ShutdownTimeout,
	}, nil
}

func newRequestInfoFactory() *request.RequestInfoFactory {
	return &request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}
}

// SecureAddr is where the proxy serves TLS.
func (s *Server) SecureAddr() net.Addr { return s.serving.Listener.Addr() }

// SlackAddr is where Slack's button clicks are served (nil without Slack).
func (s *Server) SlackAddr() net.Addr {
	if s.slackListener == nil {
		return nil
	}
	return s.slackListener.Addr()
}

// serveSlack serves the Slack interaction endpoint, if there is one. It is
// outside the authenticating chain: Slack cannot present cluster
// credentials. Every request must carry Slack's signature instead, which
// the handler checks before reading anything else.
func (s *Server) serveSlack() *http.Server {
	h := s.interceptor.SlackInteractions()
	if h == nil || s.slackListener == nil {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("POST /slack/interactions", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := srv.Serve(s.slackListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("the Slack interaction endpoint stopped", zap.Error(err))
		}
	}()
	s.log.Info("serving Slack interactions", zap.String("address", s.slackListener.Addr().String()))
	return srv
}

// MetricsAddr is where /metrics and the health endpoints are served.
func (s *Server) MetricsAddr() net.Addr { return s.metricsListener.Addr() }

// Run serves until ctx is cancelled, then stops accepting connections, lets
// in-flight requests drain for up to the shutdown timeout and returns.
func (s *Server) Run(ctx context.Context) error {
	probeCtx, stopProbe := context.WithCancel(context.Background())
	defer stopProbe()
	s.interceptor.Run(probeCtx)
	go s.probe.run(probeCtx)
	if s.namespace != nil {
		go s.namespace.Run(probeCtx)
	}

	metricsServer := &http.Server{Handler: s.metricsMux(), ReadHeaderTimeout: 10 * time.Second}
	metricsDone := make(chan error, 1)
	go func() { metricsDone <- metricsServer.Serve(s.metricsListener) }()
	slackServer := s.serveSlack()

	stopCh := make(chan struct{})
	stoppedCh, listenerStoppedCh, err := s.serving.Serve(s.buildHandler(), s.shutdownTimeout, stopCh)
	if err != nil {
		_ = metricsServer.Close()
		return fmt.Errorf("serving: %w", err)
	}
	s.log.Info("kausality-proxy serving", zap.String("address", s.SecureAddr().String()),
		zap.String("metrics", s.MetricsAddr().String()), zap.String("upstream", s.upstream.url.String()))

	select {
	case <-ctx.Done():
	case err := <-metricsDone:
		close(stopCh)
		<-stoppedCh
		return fmt.Errorf("metrics server stopped: %w", err)
	}

	s.log.Info("shutting down: draining in-flight requests", zap.Duration("timeout", s.shutdownTimeout))
	s.shuttingDown.Store(true)
	s.startDrain()
	close(stopCh)
	<-listenerStoppedCh
	<-stoppedCh
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Deliver the queued reports within the same short grace period.
	_ = s.interceptor.Shutdown(shutdownCtx)
	if slackServer != nil {
		_ = slackServer.Shutdown(shutdownCtx)
	}
	if err := metricsServer.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.log.Info("shut down")
	return nil
}
