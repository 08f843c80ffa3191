package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/net/http/httpguts"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/kausality-io/kausality-proxy/proxy"
)

// Child roles: the two proxies under test run in their own processes, so
// that their CPU time and memory are theirs alone.
const (
	roleKausality = "kausality"
	roleBare      = "bare"
)

// childSpec is what the harness tells a child (as JSON on the command line).
type childSpec struct {
	Role string `json:"role"`
	// Kubeconfig holds the proxy's own upstream identity.
	Kubeconfig   string `json:"kubeconfig"`
	ClientCAFile string `json:"clientCAFile"`
	WorkDir      string `json:"workDir"`
	// ConfigFile is kausality-proxy's --config.
	ConfigFile string `json:"configFile"`
}

// childReady is the child's first line on stdout.
type childReady struct {
	ServeURL   string `json:"serveURL"`
	ControlURL string `json:"controlURL"`
	CAData     []byte `json:"caData"`
	PID        int    `json:"pid"`
	Err        string `json:"err,omitempty"`
}

// runChild serves until stdin is closed (the harness went away or is done).
func runChild(specJSON string) error {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("child spec: %w", err)
	}
	logFile, err := os.Create(filepath.Join(spec.WorkDir, spec.Role+".log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(logFile), zapcore.InfoLevel))
	klog.SetLogger(zapr.NewLogger(log.Named("klog")))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	counter := newUpstreamCounter()
	ctrlL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	(&controlServer{counter: counter}).serve(ctrlL)

	upstream, err := clientcmd.BuildConfigFromFlags("", spec.Kubeconfig)
	if err != nil {
		return err
	}
	upstream.WrapTransport = counter.wrapAll

	ready := childReady{ControlURL: "http://" + ctrlL.Addr().String(), PID: os.Getpid()}
	var done <-chan error
	switch spec.Role {
	case roleKausality:
		done, err = serveKausality(ctx, spec, upstream, counter, log, &ready)
	case roleBare:
		done, err = serveBare(ctx, spec, upstream, counter, &ready)
	default:
		err = fmt.Errorf("unknown role %q", spec.Role)
	}
	if err != nil {
		ready.Err = err.Error()
	}
	line, _ := json.Marshal(ready)
	fmt.Println(string(line))
	if err != nil {
		return err
	}
	return <-done
}

// serveKausality runs kausality-proxy in this process exactly as the e2e
// local provider does: Options → Config → Complete → New → Run.
func serveKausality(ctx context.Context, spec childSpec, upstream *rest.Config, counter *upstreamCounter, log *zap.Logger, ready *childReady) (<-chan error, error) {
	opts := proxy.NewOptions()
	opts.UpstreamConfig = upstream
	opts.ClientCAFile = spec.ClientCAFile
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	var err error
	if opts.SecureServing.Listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	opts.SecureServing.ServerCert.CertDirectory = filepath.Join(spec.WorkDir, "kausality-certs")
	if opts.MetricsListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	opts.ConfigFile = spec.ConfigFile
	opts.WrapUpstreamTransport = counter.wrapForwarded
	counter.proxyNamespace = opts.Drifts.Namespace
	opts.ShutdownTimeout = 2 * time.Second
	srv, err := proxy.NewServer(opts, log)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	ready.ServeURL = "https://" + srv.SecureAddr().String()
	ready.CAData, err = os.ReadFile(filepath.Join(opts.SecureServing.ServerCert.CertDirectory, opts.SecureServing.ServerCert.PairName+".crt"))
	if err != nil {
		return nil, err
	}
	// Ready when /readyz says so (the upstream probe has succeeded).
	metricsURL := "http://" + srv.MetricsAddr().String() + "/readyz"
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(metricsURL)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return done, nil
			}
			err = fmt.Errorf("/readyz: %d %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("kausality-proxy not ready after 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serveBare runs the floor every proxy pays: TLS in (HTTP/2, client
// certificates verified against the same CA as kausality-proxy's), a plain
// httputil.ReverseProxy with immediate flushing, HTTP/2 out with a
// client-go transport. No authentication, no identity, no logic. Upgrade
// requests (which HTTP/2 cannot carry) go out over HTTP/1.1.
func serveBare(ctx context.Context, spec childSpec, upstream *rest.Config, counter *upstreamCounter, ready *childReady) (<-chan error, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, err
	}
	h2, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := rest.TLSConfigFor(upstream)
	if err != nil {
		return nil, err
	}
	tlsCfg = tlsCfg.Clone()
	tlsCfg.NextProtos = []string{"http/1.1"}
	h1 := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: false, MaxIdleConnsPerHost: 16}
	var transport http.RoundTripper = rtFunc(func(r *http.Request) (*http.Response, error) {
		if httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade") {
			return h1.RoundTrip(r)
		}
		return h2.RoundTrip(r)
	})
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		},
		Transport:     counter.wrapForwarded(transport),
		FlushInterval: -1,
	}

	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(spec.ClientCAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificates in the client CA file")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler:           rp,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			ClientAuth:   tls.VerifyClientCertIfGiven,
			MinVersion:   tls.VersionTLS12,
		},
	}
	done := make(chan error, 1)
	go func() {
		err := srv.ServeTLS(l, "", "")
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	ready.ServeURL = "https://" + l.Addr().String()
	ready.CAData = certPEM
	return done, nil
}
