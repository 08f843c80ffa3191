package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// upstreamProbe keeps the last known health of kube-apiserver so that our
// /readyz answers at once, without a round trip per probe.
type upstreamProbe struct {
	client   *http.Client
	url      string
	interval time.Duration
	log      *zap.Logger
	metrics  *metrics

	mu      sync.RWMutex
	lastErr error
}

func newUpstreamProbe(client *http.Client, readyzURL string, interval time.Duration, log *zap.Logger, m *metrics) *upstreamProbe {
	return &upstreamProbe{client: client, url: readyzURL, interval: interval, log: log, metrics: m,
		lastErr: fmt.Errorf("upstream not probed yet")}
}

func (p *upstreamProbe) run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.probeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *upstreamProbe) probeOnce(ctx context.Context) {
	timeout := p.interval
	if timeout > 5*time.Second {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := p.check(ctx)
	p.mu.Lock()
	changed := (err == nil) != (p.lastErr == nil)
	p.lastErr = err
	p.mu.Unlock()
	if err == nil {
		p.metrics.upstreamUp.Set(1)
	} else {
		p.metrics.upstreamUp.Set(0)
	}
	if changed {
		if err != nil {
			p.log.Warn("upstream kube-apiserver is not ready", zap.Error(err))
		} else {
			p.log.Info("upstream kube-apiserver is ready")
		}
	}
}

func (p *upstreamProbe) check(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upstream /readyz returned %d: %s", resp.StatusCode, body)
	}
	return nil
}

func (p *upstreamProbe) err() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.lastErr
}

// metricsMux serves the plain-HTTP operations port: health and metrics.
func (s *Server) metricsMux() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	}
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/livez", ok)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.shuttingDown.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "shutting down")
			return
		}
		if err := s.probe.err(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "upstream: %v", err)
			return
		}
		// Without its namespace the proxy would drop every DriftReport and
		// keep no reservation of a once approval: it takes no traffic.
		if err := s.namespace.Err(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "namespace: %v", err)
			return
		}
		// A replica that took traffic before its approval-policy caches
		// synced would deny drift a policy approves: ready means it
		// decides as every other replica does.
		if err := s.interceptor.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "caches: %v", err)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	return mux
}
