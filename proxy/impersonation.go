package proxy

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/authn"
)

// withImpersonation resolves caller-supplied Impersonate-* headers into the
// effective user, or rejects them. The headers themselves are never
// forwarded: the upstream identity is rebuilt from the effective user.
func withImpersonation(next http.Handler, a *authn.Authenticator, m *metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, ok := callerFrom(r.Context())
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
