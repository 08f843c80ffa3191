package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	upgradeproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/authn"
)

// errUpstreamRedirect is returned by ModifyResponse for 3xx answers: the
// proxy never follows or forwards a redirect, because a redirect would point
// the caller (or our credentials) at a location nobody vetted.
var errUpstreamRedirect = errors.New("the upstream kube-apiserver answered with a redirect, which the proxy does not forward")

// upstream forwards requests to kube-apiserver. Plain requests go through
// httputil.ReverseProxy over an HTTP/2 client-go transport; upgrade requests
// (exec, attach, port-forward; SPDY and WebSocket) go through apimachinery's
// UpgradeAwareHandler over HTTP/1.1, because protocol upgrades do not exist
// in HTTP/2.
type upstream struct {
	url    *url.URL
	log    *zap.Logger
	plain  *httputil.ReverseProxy
	watch  *httputil.ReverseProxy            // plain, with small copy buffers
	write  *httputil.ReverseProxy            // plain, for answers read whole
	upProx *upgradeproxy.UpgradeAwareHandler // upgrades with the proxy's credentials
	upCall *upgradeproxy.UpgradeAwareHandler // upgrades with the caller's token
}

// upstreamURL turns rest.Config.Host into a URL; client-go accepts a bare
// host:port there and defaults to https.
func upstreamURL(cfg *rest.Config) (*url.URL, error) {
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("upstream host %q: %w", cfg.Host, err)
	}
	if cfg.APIPath != "" && cfg.APIPath != "/api" && cfg.APIPath != "/apis" {
		return nil, fmt.Errorf("upstream config sets APIPath %q; only a host (and path prefix) is supported", cfg.APIPath)
	}
	return u, nil
}

func newUpstream(cfg *rest.Config, log *zap.Logger, wrap func(http.RoundTripper) http.RoundTripper) (*upstream, error) {
	u, err := upstreamURL(cfg)
	if err != nil {
		return nil, err
	}
	// The proxy's own identity: cert, token (file, rotated) or exec plugin.
	proxyRT, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building upstream transport: %w", err)
	}
	// Token callers go upstream with their own token only. This transport
	// must not carry the proxy's client certificate: kube-apiserver tries x509
	// before bearer tokens, so the request would run as the proxy.
	anonymous := rest.AnonymousClientConfig(cfg)
	callerRT, err := rest.TransportFor(anonymous)
	if err != nil {
		return nil, fmt.Errorf("building caller transport: %w", err)
	}

	up := &upstream{url: u, log: log}
	var transport http.RoundTripper = resendOnLostConnection{next: credentialSwitch{proxy: proxyRT, caller: callerRT}}
	if wrap != nil {
		transport = wrap(transport)
	}
	up.plain = &httputil.ReverseProxy{
		Rewrite:        up.rewrite,
		Transport:      transport,
		FlushInterval:  -1, // watch and log streams must reach the caller as they happen
		ModifyResponse: forwardResponse,
		ErrorHandler:   up.writeUpstreamError,
		ErrorLog:       zap.NewStdLog(log.Named("reverseproxy")),
		BufferPool:     newBufferPool(32 * 1024),
	}
	// A watch holds its copy buffer for as long as it is open, mostly idle:
	// small buffers keep a thousand open watches cheap.
	streaming := *up.plain
	streaming.BufferPool = newBufferPool(4 * 1024)
	up.watch = &streaming
	// A write's answer is read whole before any of it is passed on
	// (readWriteAnswer), so flushing it as it is copied sends nothing
	// sooner. It costs: on HTTP/2, the header, the data and an empty frame
	// to end the stream each become a frame of their own, each handed to
	// the connection's goroutine and waited for, where an answer written
	// at the end goes as its header and one data frame that ends the
	// stream. An answer too large to read whole streams as before: one of
	// unknown length ReverseProxy flushes at once whatever FlushInterval
	// says, and one of known length goes out as the buffers fill.
	whole := *up.plain
	whole.FlushInterval = 0
	up.write = &whole

	upProxyRT, err := upgradeTransport(cfg, true)
	if err != nil {
		return nil, err
	}
	upCallerRT, err := upgradeTransport(anonymous, false)
	if err != nil {
		return nil, err
	}
	responder := upgradeproxy.ErrorResponder(upgradeErrorResponder{up})
	up.upProx = newUpgradeHandler(u, upProxyRT, responder)
	up.upCall = newUpgradeHandler(u, upCallerRT, responder)
	return up, nil
}

func newUpgradeHandler(u *url.URL, rt upgradeproxy.UpgradeRequestRoundTripper, responder upgradeproxy.ErrorResponder) *upgradeproxy.UpgradeAwareHandler {
	h := upgradeproxy.NewUpgradeAwareHandler(u, rt, false, true, responder)
	h.UpgradeTransport = rt
	h.UseRequestLocation = true
	h.AppendLocationPath = u.Path != "" && u.Path != "/"
	h.UseLocationHost = true
	h.RejectForwardingRedirects = true
	return h
}

// upgradeTransport dials HTTP/1.1 with the config's TLS identity; request
// headers the config implies (bearer token, rotated from file) are added by
// client-go's wrappers around MirrorRequest, which only returns the request.
func upgradeTransport(cfg *rest.Config, withCredentials bool) (upgradeproxy.UpgradeRequestRoundTripper, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building upgrade TLS config: %w", err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tlsConfig = tlsConfig.Clone()
	tlsConfig.NextProtos = []string{"http/1.1"}
	// Every upgrade dials a new connection; resuming TLS sessions spares
	// each exec or port-forward a full handshake.
	tlsConfig.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	conn := utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsConfig})
	conn.ForceAttemptHTTP2 = false
	conn.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	wrap := upgradeproxy.MirrorRequest
	if withCredentials {
		wrap, err = rest.HTTPWrappersForConfig(cfg, upgradeproxy.MirrorRequest)
		if err != nil {
			return nil, fmt.Errorf("building upgrade credentials: %w", err)
		}
	}
	return upgradeproxy.NewUpgradeRequestRoundTripper(conn, wrap), nil
}

func (up *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !httpstream.IsUpgradeRequest(r) {
		if info, ok := request.RequestInfoFrom(r.Context()); ok && info.Verb == "watch" {
			up.watch.ServeHTTP(w, r)
			return
		}
		if answerReadWhole(r) {
			up.write.ServeHTTP(w, r)
			return
		}
		up.plain.ServeHTTP(w, r)
		return
	}
	caller, _ := callerFrom(r.Context())
	effective, _ := request.UserFrom(r.Context())
	out := r.Clone(r.Context())
	authn.SanitizeInbound(out.Header)
	if authn.ApplyUpstreamIdentity(out.Header, caller, effective) {
		up.upProx.ServeHTTP(w, out)
		return
	}
	up.upCall.ServeHTTP(w, out)
}

func rejectRedirects(resp *http.Response) error {
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 && resp.StatusCode != http.StatusNotModified {
		_ = resp.Body.Close()
		return errUpstreamRedirect
	}
	return nil
}

func (up *upstream) writeUpstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == context.Canceled {
		// The caller went away; nobody reads an answer.
		return
	}
	status := up.classify(r, err)
	if status.ErrStatus.Code >= 500 {
		up.log.Warn("upstream request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path),
			zap.Int32("code", status.ErrStatus.Code), zap.Error(err))
	}
	WriteStatus(w, status)
}

// classify turns a transport error into the Status the caller sees: 503 when
// kube-apiserver cannot be reached (clients retry those), 504 when our own
// deadline ran out, 502 for everything else the upstream did wrong.
func (up *upstream) classify(r *http.Request, err error) *apierrors.StatusError {
	switch {
	case errors.Is(err, errUpstreamRedirect):
		return statusError(http.StatusBadGateway, metav1.StatusReasonInternalError, err.Error())
	case errors.Is(err, errBodyDeadline):
		return bodyTimeout()
	case errors.Is(err, context.DeadlineExceeded) || r.Context().Err() == context.DeadlineExceeded:
		return statusError(http.StatusGatewayTimeout, metav1.StatusReasonTimeout,
			"the request did not complete within the proxy's --request-timeout; retry, or use a watch for long-running reads")
	case isUnreachable(err):
		e := statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("the upstream kube-apiserver at %s is unavailable: %v", up.url.Host, err))
		e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		return e
	default:
		return statusError(http.StatusBadGateway, metav1.StatusReasonInternalError,
			fmt.Sprintf("error talking to the upstream kube-apiserver at %s: %v", up.url.Host, err))
	}
}

func isUnreachable(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		strings.Contains(err.Error(), "error dialing backend")
}

// upgradeErrorResponder answers failed upgrade dials with the same Status
// as plain requests.
type upgradeErrorResponder struct{ up *upstream }

func (e upgradeErrorResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	e.up.writeUpstreamError(w, r, err)
}

// bufferPool recycles ReverseProxy copy buffers instead of allocating one
// per response.
type bufferPool struct {
	size int
	pool sync.Pool
}

func newBufferPool(size int) *bufferPool {
	p := &bufferPool{size: size}
	p.pool.New = func() any { b := make([]byte, size); return &b }
	return p
}

func (p *bufferPool) Get() []byte { return *(p.pool.Get().(*[]byte)) }

func (p *bufferPool) Put(b []byte) {
	if cap(b) != p.size {
		return
	}
	b = b[:p.size]
	p.pool.Put(&b)
}
