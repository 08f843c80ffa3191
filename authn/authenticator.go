package authn

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	authzwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	authzmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Defaults applied by New to zero-valued Config fields.
const (
	// DefaultTokenCacheTTL is how long a successful TokenReview is reused.
	// Staleness here cannot grant access: the token itself is passed through
	// and re-verified by the upstream on every request. It is shorter than
	// kube-apiserver's webhook default (2m) because the proxy's decisions
	// rest on the identity: a token that no longer authenticates should stop
	// counting as its controller within seconds.
	DefaultTokenCacheTTL = 10 * time.Second
	// DefaultTokenCacheFailureTTL is how long a rejected token stays rejected
	// without asking the upstream again.
	DefaultTokenCacheFailureTTL = 10 * time.Second
	// DefaultAuthorizedTTL is how long an allowed SubjectAccessReview (an
	// impersonation, or a write the proxy is about to work on) is reused
	// (the generic apiserver's delegated authorization default). It bounds
	// how long a revoked permission keeps working at the proxy.
	DefaultAuthorizedTTL = 10 * time.Second
	// DefaultUnauthorizedTTL is how long a denied SubjectAccessReview is
	// reused.
	DefaultUnauthorizedTTL = 10 * time.Second
	// DefaultTokenReviewTimeout bounds one TokenReview, retries included.
	DefaultTokenReviewTimeout = 10 * time.Second
)

// Config configures an Authenticator. The zero value authenticates nobody.
type Config struct {
	// ClientCA verifies client certificates. nil disables x509
	// authentication. It is read on every request, so a dynamic provider
	// (dynamiccertificates.NewDynamicCAContentFromFile) reloads the bundle
	// without a restart; the caller must Run it (New does not start
	// goroutines). The certificate's CommonName is the user name and its
	// Organizations are the groups (x509.CommonNameUserConversion).
	ClientCA dynamiccertificates.CAContentProvider

	// TokenReviews verifies bearer tokens, normally
	// clientset.AuthenticationV1().TokenReviews() built from the proxy's own
	// upstream credentials (it needs "create tokenreviews"). nil disables
	// bearer token authentication.
	TokenReviews authenticationv1client.TokenReviewInterface
	// TokenCacheTTL is how long a successful TokenReview is cached. Zero
	// means DefaultTokenCacheTTL; negative disables positive caching.
	//
	// The cache is k8s.io/apiserver's token cache: entries are keyed by an
	// HMAC-SHA256 of token and audiences (raw tokens are never kept),
	// concurrent lookups of one token are coalesced, and entries expire by
	// TTL. NOTE: in k8s.io/apiserver v0.35 the cache is NOT capped by entry
	// count (32 stripes of expiring maps, swept on insert). Its size is
	// bounded by (distinct tokens reviewed per second) x TTL, and the rate
	// of reviews is in turn bounded by the TokenReviews client's rate
	// limiter (client-go QPS/Burst).
	TokenCacheTTL time.Duration
	// TokenCacheFailureTTL is how long a token the upstream rejected is
	// cached as rejected. Zero means DefaultTokenCacheFailureTTL; negative
	// disables negative caching. Failures to reach the TokenReview API at
	// all are never cached.
	TokenCacheFailureTTL time.Duration
	// TokenReviewTimeout bounds one TokenReview including retries. Zero
	// means DefaultTokenReviewTimeout.
	TokenReviewTimeout time.Duration
	// APIAudiences, when set, are sent in every TokenReview and the token
	// must be valid for at least one of them. Leave empty to accept exactly
	// the tokens the upstream accepts for itself (its own API audiences),
	// which is right for token passthrough.
	APIAudiences authenticator.Audiences
	// AllowAnonymous authenticates requests that present no credentials at
	// all as system:anonymous (group system:unauthenticated). Requests that
	// present a bad certificate or a bad token are still rejected, as in
	// kube-apiserver.
	AllowAnonymous bool

	// SubjectAccessReviews authorizes callers' own Impersonate-* headers,
	// normally clientset.AuthorizationV1().SubjectAccessReviews() (the proxy
	// needs "create subjectaccessreviews"). nil means every impersonation
	// attempt is rejected with 403.
	SubjectAccessReviews authorizationv1client.SubjectAccessReviewInterface
	// AuthorizedTTL is how long an allowed SubjectAccessReview is cached.
	// Zero means DefaultAuthorizedTTL; negative disables caching. The SAR
	// cache is an LRU capped at 8192 entries.
	AuthorizedTTL time.Duration
	// UnauthorizedTTL is how long a denied SubjectAccessReview is cached.
	// Zero means DefaultUnauthorizedTTL; negative disables caching.
	UnauthorizedTTL time.Duration

	// WebhookRetryBackoff controls retries of TokenReviews and
	// SubjectAccessReviews that fail with 429, 5xx or a connection error.
	// nil means k8s.io/apiserver's default (5 attempts from 500ms, x1.5).
	WebhookRetryBackoff *wait.Backoff
}

// Authenticator decides who the caller of a request is and whether the
// caller may impersonate someone else. It is safe for concurrent use.
type Authenticator struct {
	clientCA  dynamiccertificates.CAContentProvider
	x509      authenticator.Request // nil: disabled
	bearer    authenticator.Request // nil: disabled
	anonymous authenticator.Request // nil: disabled
	audiences authenticator.Audiences

	// authz authorizes impersonation; nil rejects every attempt.
	authz authorizer.Authorizer
}

// New builds an Authenticator from k8s.io/apiserver's authenticators:
// x509.NewDynamic with CommonNameUserConversion, bearertoken over the token
// cache over the TokenReview webhook authenticator, and the SubjectAccessReview
// webhook authorizer (with its cache) for impersonation. x509 and bearer
// callers get the system:authenticated group added as kube-apiserver does.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{audiences: cfg.APIAudiences, clientCA: cfg.ClientCA}
	backoff := tokenwebhook.DefaultRetryBackoff()
	if cfg.WebhookRetryBackoff != nil {
		backoff = cfg.WebhookRetryBackoff
	}

	if cfg.ClientCA != nil {
		a.x509 = group.NewAuthenticatedGroupAdder(newVerifiedCertCache(
			x509request.NewDynamic(cfg.ClientCA.VerifyOptions, x509request.CommonNameUserConversion),
			cfg.ClientCA.CurrentCABundleContent))
	}

	if cfg.TokenReviews != nil {
		rc, err := bridgeRESTClient(authenticationv1.SchemeGroupVersion, &reviewTransport{tokenReviews: cfg.TokenReviews})
		if err != nil {
			return nil, fmt.Errorf("TokenReview client: %w", err)
		}
		timeout := cfg.TokenReviewTimeout
		if timeout == 0 {
			timeout = DefaultTokenReviewTimeout
		}
		webhook, err := tokenwebhook.NewFromInterface(authenticationGroup{client: rc}, cfg.APIAudiences, *backoff, timeout,
			tokenwebhook.AuthenticatorMetrics{
				RecordRequestTotal:   func(context.Context, string) {},
				RecordRequestLatency: func(context.Context, string, float64) {},
			})
		if err != nil {
			return nil, fmt.Errorf("TokenReview authenticator: %w", err)
		}
		cached := tokencache.New(classifyTokenReview(webhook), false,
			ttlOrDefault(cfg.TokenCacheTTL, DefaultTokenCacheTTL),
			ttlOrDefault(cfg.TokenCacheFailureTTL, DefaultTokenCacheFailureTTL))
		a.bearer = group.NewAuthenticatedGroupAdder(bearertoken.New(cached))
	}

	if cfg.AllowAnonymous {
		a.anonymous = anonymous.NewAuthenticator(nil)
	}

	if cfg.SubjectAccessReviews != nil {
		rc, err := bridgeRESTClient(authorizationv1.SchemeGroupVersion, &reviewTransport{sars: cfg.SubjectAccessReviews})
		if err != nil {
			return nil, fmt.Errorf("SubjectAccessReview client: %w", err)
		}
		// The webhook's own cache is off (an entry expires as it is
		// added): cachedAuthorizer keeps the answers, with a key that
		// costs no JSON encoding per request.
		const uncached = -time.Nanosecond
		authz, err := authzwebhook.NewFromInterface(authorizationGroup{client: rc}, uncached, uncached,
			*backoff, authorizer.DecisionNoOpinion, authzmetrics.NoopAuthorizerMetrics{}, nil)
		if err != nil {
			return nil, fmt.Errorf("SubjectAccessReview authorizer: %w", err)
		}
		a.authz = newCachedAuthorizer(authz,
			ttlOrDefault(cfg.AuthorizedTTL, DefaultAuthorizedTTL),
			ttlOrDefault(cfg.UnauthorizedTTL, DefaultUnauthorizedTTL))
	}
	return a, nil
}

func ttlOrDefault(ttl, def time.Duration) time.Duration {
	switch {
	case ttl == 0:
		return def
	case ttl < 0:
		return 0 // the caches treat 0 as "do not cache"
	default:
		return ttl
	}
}

// reviewAnsweredKey carries a *atomic.Bool through the TokenReview webhook
// into reviewTransport, which sets it when the upstream answered the review
// (whatever the answer). It separates "the upstream said this token is
// invalid" (cacheable, 401) from "we could not ask" (not cached, 503), which
// the webhook authenticator reports identically as a bare error.
type reviewAnsweredKey struct{}

func markReviewAnswered(ctx context.Context) {
	if answered, ok := ctx.Value(reviewAnsweredKey{}).(*atomic.Bool); ok {
		answered.Store(true)
	}
}

// errTokenReviewUnavailable marks a TokenReview that got no answer.
type errTokenReviewUnavailable struct{ err error }

func (e *errTokenReviewUnavailable) Error() string { return "TokenReview failed: " + e.err.Error() }
func (e *errTokenReviewUnavailable) Unwrap() error { return e.err }

// classifyTokenReview sits between the token cache and the TokenReview
// webhook. A review the upstream answered with authenticated=false (with or
// without status.error) becomes a plain negative result, which the cache
// keeps for TokenCacheFailureTTL. A review that got no answer becomes an
// errTokenReviewUnavailable, which the cache (built with cacheErrs=false)
// does not keep.
func classifyTokenReview(webhook authenticator.Token) authenticator.Token {
	return authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		answered := &atomic.Bool{}
		resp, ok, err := webhook.AuthenticateToken(context.WithValue(ctx, reviewAnsweredKey{}, answered), token)
		switch {
		case ok && err == nil:
			return resp, true, nil
		case err != nil && !answered.Load():
			return nil, false, &errTokenReviewUnavailable{err: err}
		default:
			return nil, false, nil
		}
	})
}

// AuthenticateRequest identifies the caller of r.
//
// A client certificate that verifies against ClientCA wins; a bearer token in
// the Authorization header is only consulted (by TokenReview) when there is no
// verified certificate. If neither is presented and AllowAnonymous is set the
// caller is system:anonymous. As in kube-apiserver, a certificate that fails
// verification does not stop a valid bearer token from authenticating, but a
// failed credential is never downgraded to anonymous.
//
// Errors are *apierrors.StatusError: 401 with a message saying what to fix
// when the caller cannot be authenticated, 503 when the TokenReview API
// could not be reached, 500 for internal failures. r and its headers are
// not modified.
func (a *Authenticator) AuthenticateRequest(r *http.Request) (*Caller, error) {
	ctx := r.Context()
	if len(a.audiences) > 0 {
		ctx = authenticator.WithAudiences(ctx, a.audiences)
	}
	// The authenticators only read the TLS state and the Authorization
	// header, but bearertoken deletes that header on success: give them a
	// shallow copy with a private header map.
	req := r.WithContext(ctx)
	req.Header = http.Header{}
	if v := r.Header.Values("Authorization"); len(v) > 0 {
		req.Header["Authorization"] = slices.Clone(v)
	}

	var problems []string

	hasCert := r.TLS != nil && len(r.TLS.PeerCertificates) > 0
	switch {
	case hasCert && a.x509 != nil:
		resp, ok, err := a.x509.AuthenticateRequest(req)
		if err == nil && ok {
			return a.accept(resp, MethodX509, "")
		}
		if _, loaded := a.clientCA.VerifyOptions(); !loaded && err == nil {
			problems = append(problems, "no client CA bundle is loaded: client certificates cannot be verified")
		} else {
			problems = append(problems, describeCertError(err))
		}
	case hasCert:
		// kube-apiserver ignores certificates when it has no client CA;
		// so do we, but say so if nothing else works.
		problems = append(problems, "client certificates are not accepted by this proxy (no client CA configured)")
	}

	token, hasToken := bearerToken(r.Header)
	switch {
	case hasToken && a.bearer != nil:
		resp, ok, err := a.bearer.AuthenticateRequest(req)
		if err == nil && ok {
			return a.accept(resp, MethodToken, token)
		}
		var unavailable *errTokenReviewUnavailable
		switch {
		case errors.As(err, &unavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("unable to verify bearer token: %v", err))
		case isAPIStatus(err):
			return nil, apierrors.NewInternalError(fmt.Errorf("verifying bearer token: %w", err))
		}
		problems = append(problems, "invalid bearer token")
	case hasToken:
		problems = append(problems, "bearer tokens are not accepted by this proxy")
		hasToken = false // kube-apiserver without token authenticators ignores the header
	}

	// Failed credentials are final (kube-apiserver's union.NewFailOnError
	// in front of the anonymous authenticator). Ignored ones are not.
	failedCert := hasCert && a.x509 != nil
	if !failedCert && !hasToken && a.anonymous != nil {
		resp, ok, err := a.anonymous.AuthenticateRequest(req)
		if err == nil && ok {
			return a.accept(resp, MethodAnonymous, "")
		}
	}

	//nolint:nestif // the message names what the request presented: no credentials, an empty token, or an unsupported scheme
	if len(problems) == 0 {
		if auth := strings.TrimSpace(r.Header.Get("Authorization")); auth != "" {
			scheme, _, _ := strings.Cut(auth, " ")
			if strings.EqualFold(scheme, "bearer") {
				problems = append(problems, "empty bearer token")
			} else {
				problems = append(problems, fmt.Sprintf("unsupported Authorization scheme %q: present a bearer token or a client certificate", scheme))
			}
		} else {
			problems = append(problems, "no credentials provided: present a client certificate or a bearer token")
		}
	}
	return nil, apierrors.NewUnauthorized(strings.Join(problems, "; "))
}

// accept turns an authenticator response into a Caller, refusing identities
// that cannot be represented upstream.
func (a *Authenticator) accept(resp *authenticator.Response, method Method, token string) (*Caller, error) {
	if resp == nil || resp.User == nil || resp.User.GetName() == "" {
		// An empty user name cannot be impersonated (an empty
		// Impersonate-User header means "no impersonation", i.e. the proxy
		// itself) and is meaningless to policy.
		return nil, apierrors.NewUnauthorized(fmt.Sprintf("%s credentials do not name a user", method))
	}
	if len(a.audiences) > 0 && len(resp.Audiences) > 0 && len(a.audiences.Intersect(resp.Audiences)) == 0 {
		return nil, apierrors.NewUnauthorized(fmt.Sprintf("%s credentials are not valid for this server's audiences", method))
	}
	if err := ValidateIdentity(resp.User); err != nil {
		return nil, apierrors.NewUnauthorized(fmt.Sprintf("%s credentials name an identity that cannot be passed on exactly: %v", method, err))
	}
	return &Caller{User: resp.User, Method: method, Token: token}, nil
}

// Authorizer returns the cached SubjectAccessReview authorizer the proxy
// uses for impersonation, for checking other access of the effective user
// (the write path asks it before doing any work for a write). nil when the
// Authenticator was built without a SubjectAccessReview client.
func (a *Authenticator) Authorizer() authorizer.Authorizer { return a.authz }

// bearerToken extracts the token exactly as bearertoken.Authenticator does.
func bearerToken(h http.Header) (string, bool) {
	auth := strings.TrimSpace(h.Get("Authorization"))
	if auth == "" {
		return "", false
	}
	parts := strings.SplitN(auth, " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// describeCertError turns an x509 verification failure into advice.
func describeCertError(err error) string {
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalid          x509.CertificateInvalidError
	)
	switch {
	case err == nil:
		// verified, but CommonNameUserConversion found no user
		return "client certificate has an empty subject common name (CN); the CN is the user name"
	case errors.As(err, &unknownAuthority):
		return "client certificate not signed by a trusted CA"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "client certificate has expired or is not yet valid"
	case errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage:
		return "client certificate is not valid for client authentication (extended key usage)"
	default:
		return fmt.Sprintf("client certificate rejected: %v", err)
	}
}

func isAPIStatus(err error) bool {
	var s apierrors.APIStatus
	return errors.As(err, &s)
}
