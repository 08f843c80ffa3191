package proxy

import (
	"context"
	"net/http"

	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/authn"
)

type callerKey struct{}

// callerFrom returns the authenticated caller (before impersonation) that
// withAuthentication stored. The effective user, after an authorized
// impersonation, is request.UserFrom.
func callerFrom(ctx context.Context) (*authn.Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*authn.Caller)
	return c, ok && c != nil
}

// withAuthentication stores the authenticated caller in the request context,
// or answers the caller's failure itself: nothing past this filter runs for
// a request nobody vouched for.
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
