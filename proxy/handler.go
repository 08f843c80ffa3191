package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"

	"github.com/kausality-io/kausality-proxy/authn"
	"github.com/kausality-io/kausality-proxy/internal/httpx"
)

type callerKey struct{}

// CallerFrom returns the authenticated caller (before impersonation) that
// withAuthentication stored. The effective user, after an authorized
// impersonation, is request.UserFrom.
func CallerFrom(ctx context.Context) (*authn.Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*authn.Caller)
	return c, ok && c != nil
}

// buildHandler composes the serving chain, outermost first:
//
//	early answer close → panic recovery → request info → metrics →
//	upgrade restriction → authentication → impersonation →
//	max mutating in flight → request deadline → write interception →
//	upstream
//
// Nothing before authentication talks to the upstream, so a request that
// fails authentication or impersonation sends zero bytes upstream. The
// interceptor authorizes a write before it does any work for it.
func (s *Server) buildHandler() http.Handler {
	var h http.Handler = s.upstream
	h = s.interceptor.Wrap(h, WriteStatus)
	h = withRequestDeadline(h, s.longRunning, s.requestTimeout, s.drainCtx)
	h = withMaxMutatingInFlight(h, s.maxMutatingInFlight, s.longRunning, s.metrics)
	h = withImpersonation(h, s.authenticator, s.metrics)
	h = withAuthentication(h, s.authenticator, s.metrics, s.log)
	h = withUpgradeRestriction(h)
	h = withMetrics(h, s.metrics, s.longRunning)
	h = genericapifilters.WithRequestInfo(h, s.requestInfo)
	h = withPanicRecovery(h, s.log)
	h = withEarlyAnswerClose(h)
	return h
}

func newLongRunningCheck() request.LongRunningRequestCheck {
	return genericfilters.BasicLongRunningRequestCheck(
		sets.NewString("watch", "proxy"),
		sets.NewString("attach", "exec", "proxy", "log", "portforward"),
	)
}

func withAuthentication(next http.Handler, a *authn.Authenticator, m *metrics, log *zap.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, err := a.AuthenticateRequest(r)
		if err != nil {
			m.authFailures.Inc()
			log.Debug("authentication failed", zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr), zap.Error(err))
			limitUnauthenticatedHTTP2(w, r)
			WriteStatus(w, err)
			return
		}
		if caller.User.GetName() == user.Anonymous {
			limitUnauthenticatedHTTP2(w, r)
		}
		ctx := context.WithValue(r.Context(), callerKey{}, caller)
		ctx = request.WithUser(ctx, caller.User)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// limitUnauthenticatedHTTP2 ends an HTTP/2 connection after this request
// (a GOAWAY, then the connection closes) when its caller did not
// authenticate, as kube-apiserver does: HTTP/2 lets one connection carry
// many cheap streams, which nobody without credentials should get to keep
// open. HTTP/1.1 answers end the connection when their body is left
// unread (withEarlyAnswerClose).
func limitUnauthenticatedHTTP2(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 2 {
		w.Header().Set("Connection", "close")
	}
}

// withImpersonation resolves caller-supplied Impersonate-* headers into the
// effective user, or rejects them. The headers themselves are never
// forwarded: the upstream identity is rebuilt from the effective user.
func withImpersonation(next http.Handler, a *authn.Authenticator, m *metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, ok := CallerFrom(r.Context())
		if !ok {
			WriteStatus(w, apierrors.NewInternalError(fmt.Errorf("no authenticated caller in request context")))
			return
		}
		effective, err := a.ResolveImpersonation(r.Context(), caller, r.Header)
		if err != nil {
			m.impersonationDenials.Inc()
			WriteStatus(w, err)
			return
		}
		if err := authn.ValidateIdentity(effective); err != nil {
			m.impersonationDenials.Inc()
			WriteStatus(w, apierrors.NewBadRequest("the requested impersonation cannot be passed on exactly: "+err.Error()))
			return
		}
		next.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), effective)))
	})
}

func withPanicRecovery(next http.Handler, log *zap.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p) // the standard way to abort a stream; let net/http handle it
				}
				log.Error("panic while serving request", zap.Any("panic", p), zap.String("path", r.URL.Path), zap.Stack("stack"))
				WriteStatus(w, apierrors.NewInternalError(fmt.Errorf("the proxy hit an internal error; see its log")))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func withMetrics(next http.Handler, m *metrics, longRunning request.LongRunningRequestCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := httpx.NewCodeRecorder(w)
		m.inflight.Inc()
		defer m.inflight.Dec()
		next.ServeHTTP(rec, r)
		code := rec.Code()
		if code == 0 {
			code = http.StatusOK
		}
		verb, resource := "unknown", ""
		if info, ok := request.RequestInfoFrom(r.Context()); ok {
			verb, resource = metricVerb(info.Verb), info.Resource
			if info.Subresource != "" {
				resource += "/" + info.Subresource
			}
			resource = m.resources.value(resource, code < http.StatusBadRequest)
			if longRunning(r, info) {
				verb = "long-running:" + verb
			}
		}
		m.requests.WithLabelValues(verb, resource, strconv.Itoa(code)).Inc()
		m.duration.WithLabelValues(verb).Observe(time.Since(start).Seconds())
	})
}
