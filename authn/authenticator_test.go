package authn

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

const credentialIDKey = "authentication.kubernetes.io/credential-id"

func x509CredentialID(c *x509.Certificate) string {
	fp := sha256.Sum256(c.Raw)
	return "X509SHA256=" + hex.EncodeToString(fp[:])
}

func TestAuthenticateRequest(t *testing.T) {
	ca := newTestCA(t, "client-ca")
	otherCA := newTestCA(t, "other-ca")

	alice := ca.issue(t, certOpts{cn: "alice", orgs: []string{"dev", "ops"}})
	aliceFromOtherCA := otherCA.issue(t, certOpts{cn: "alice", orgs: []string{"system:masters"}})
	expired := ca.issue(t, certOpts{cn: "alice", notBefore: time.Now().Add(-48 * time.Hour), notAfter: time.Now().Add(-24 * time.Hour)})
	notYetValid := ca.issue(t, certOpts{cn: "alice", notBefore: time.Now().Add(time.Hour), notAfter: time.Now().Add(2 * time.Hour)})
	serverOnly := ca.issue(t, certOpts{cn: "alice", usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	noCN := ca.issue(t, certOpts{orgs: []string{"dev"}})

	bob := authenticationv1.UserInfo{
		Username: "bob", UID: "bob-uid", Groups: []string{"team", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"pod-1"}},
	}
	// A TokenReview answer without system:authenticated: the group adder adds it.
	carol := authenticationv1.UserInfo{Username: "carol", Groups: []string{"qa"}}
	nameless := authenticationv1.UserInfo{Groups: []string{"qa"}}

	type want struct {
		method  Method
		user    *user.DefaultInfo
		token   string
		code    int32
		message string // substring of the error message
		reviews int    // TokenReviews sent
	}
	tests := []struct {
		name      string
		cfg       func(c *Config)
		cert      *x509.Certificate
		headers   map[string]string
		want      want
		noTokens  bool
		noCA      bool
		anonymous bool
	}{
		{
			name: "x509 valid",
			cert: alice,
			want: want{method: MethodX509, user: &user.DefaultInfo{
				Name: "alice", Groups: []string{"dev", "ops", "system:authenticated"},
				Extra: map[string][]string{credentialIDKey: {x509CredentialID(alice)}},
			}},
		},
		{name: "x509 signed by another CA", cert: aliceFromOtherCA, want: want{code: 401, message: "client certificate not signed by a trusted CA"}},
		{name: "x509 expired", cert: expired, want: want{code: 401, message: "client certificate has expired or is not yet valid"}},
		{name: "x509 not yet valid", cert: notYetValid, want: want{code: 401, message: "client certificate has expired or is not yet valid"}},
		{name: "x509 without client auth usage", cert: serverOnly, want: want{code: 401, message: "not valid for client authentication"}},
		{name: "x509 without CN", cert: noCN, want: want{code: 401, message: "empty subject common name"}},
		{name: "no cert, no token", want: want{code: 401, message: "no credentials provided"}},
		{
			name:    "x509 disabled ignores the cert",
			noCA:    true,
			cert:    alice,
			want:    want{code: 401, message: "client certificates are not accepted by this proxy"},
			headers: nil,
		},
		{
			name:    "token valid",
			headers: map[string]string{"Authorization": "Bearer bob-token"},
			want: want{method: MethodToken, token: "bob-token", reviews: 1, user: &user.DefaultInfo{
				Name: "bob", UID: "bob-uid", Groups: []string{"team", "system:authenticated"},
				Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"pod-1"}},
			}},
		},
		{
			name:    "token scheme is case-insensitive and extra fields are ignored",
			headers: map[string]string{"Authorization": "bearer bob-token trailing"},
			want: want{method: MethodToken, token: "bob-token", reviews: 1, user: &user.DefaultInfo{
				Name: "bob", UID: "bob-uid", Groups: []string{"team", "system:authenticated"},
				Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"pod-1"}},
			}},
		},
		{
			name:    "token user gets system:authenticated",
			headers: map[string]string{"Authorization": "Bearer carol-token"},
			want: want{method: MethodToken, token: "carol-token", reviews: 1,
				user: &user.DefaultInfo{Name: "carol", Groups: []string{"qa", "system:authenticated"}}},
		},
		{name: "token invalid", headers: map[string]string{"Authorization": "Bearer nope"}, want: want{code: 401, message: "invalid bearer token", reviews: 1}},
		{name: "token names no user", headers: map[string]string{"Authorization": "Bearer nameless-token"}, want: want{code: 401, message: "do not name a user", reviews: 1}},
		{name: "empty bearer token", headers: map[string]string{"Authorization": "Bearer "}, want: want{code: 401, message: "empty bearer token"}},
		{name: "basic auth is not a credential", headers: map[string]string{"Authorization": "Basic YWxpY2U6cHc="}, want: want{code: 401, message: `unsupported Authorization scheme "Basic"`}},
		{
			name:     "token disabled",
			noTokens: true,
			headers:  map[string]string{"Authorization": "Bearer bob-token"},
			want:     want{code: 401, message: "bearer tokens are not accepted by this proxy"},
		},
		{
			name:    "valid cert and valid token: cert wins, no TokenReview",
			cert:    alice,
			headers: map[string]string{"Authorization": "Bearer bob-token"},
			want: want{method: MethodX509, reviews: 0, user: &user.DefaultInfo{
				Name: "alice", Groups: []string{"dev", "ops", "system:authenticated"},
				Extra: map[string][]string{credentialIDKey: {x509CredentialID(alice)}},
			}},
		},
		{
			name:    "valid cert and invalid token: cert wins",
			cert:    alice,
			headers: map[string]string{"Authorization": "Bearer nope"},
			want: want{method: MethodX509, reviews: 0, user: &user.DefaultInfo{
				Name: "alice", Groups: []string{"dev", "ops", "system:authenticated"},
				Extra: map[string][]string{credentialIDKey: {x509CredentialID(alice)}},
			}},
		},
		{
			name:    "untrusted cert and valid token: token authenticates (as in kube-apiserver)",
			cert:    aliceFromOtherCA,
			headers: map[string]string{"Authorization": "Bearer bob-token"},
			want: want{method: MethodToken, token: "bob-token", reviews: 1, user: &user.DefaultInfo{
				Name: "bob", UID: "bob-uid", Groups: []string{"team", "system:authenticated"},
				Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"pod-1"}},
			}},
		},
		{
			name:    "untrusted cert and invalid token: both problems reported",
			cert:    aliceFromOtherCA,
			headers: map[string]string{"Authorization": "Bearer nope"},
			want:    want{code: 401, message: "client certificate not signed by a trusted CA; invalid bearer token", reviews: 1},
		},
		{name: "anonymous disabled", anonymous: false, want: want{code: 401, message: "no credentials provided"}},
		{
			name: "anonymous enabled", anonymous: true,
			want: want{method: MethodAnonymous, user: &user.DefaultInfo{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}},
		},
		{
			name: "anonymous enabled, basic auth header is ignored", anonymous: true,
			headers: map[string]string{"Authorization": "Basic YWxpY2U6cHc="},
			want:    want{method: MethodAnonymous, user: &user.DefaultInfo{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}},
		},
		{
			name: "anonymous enabled, token disabled: token is ignored", anonymous: true, noTokens: true,
			headers: map[string]string{"Authorization": "Bearer bob-token"},
			want:    want{method: MethodAnonymous, user: &user.DefaultInfo{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}},
		},
		{
			name: "anonymous enabled, invalid token is still 401", anonymous: true,
			headers: map[string]string{"Authorization": "Bearer nope"},
			want:    want{code: 401, message: "invalid bearer token", reviews: 1},
		},
		{
			name: "anonymous enabled, untrusted cert is still 401", anonymous: true, cert: aliceFromOtherCA,
			want: want{code: 401, message: "client certificate not signed by a trusted CA"},
		},
		{
			name: "anonymous enabled, expired cert is still 401", anonymous: true, cert: expired,
			want: want{code: 401, message: "expired"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reviews := newFakeTokenReviews(map[string]authenticationv1.UserInfo{
				"bob-token": bob, "carol-token": carol, "nameless-token": nameless,
			})
			cfg := Config{
				ClientCA:            ca.provider(t),
				TokenReviews:        reviews.AuthenticationV1().TokenReviews(),
				AllowAnonymous:      tt.anonymous,
				WebhookRetryBackoff: noRetry,
			}
			if tt.noCA {
				cfg.ClientCA = nil
			}
			if tt.noTokens {
				cfg.TokenReviews = nil
			}
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := request(tt.cert, tt.headers)
			before := r.Header.Clone()

			caller, err := a.AuthenticateRequest(r)

			if !reflect.DeepEqual(r.Header, before) {
				t.Errorf("request headers were modified:\nbefore %v\nafter  %v", before, r.Header)
			}
			if got := reviews.callCount(); got != tt.want.reviews {
				t.Errorf("TokenReviews sent = %d, want %d", got, tt.want.reviews)
			}
			if tt.want.code != 0 {
				if err == nil {
					t.Fatalf("authenticated as %v, want HTTP %d", caller, tt.want.code)
				}
				if code := statusCode(t, err); code != tt.want.code {
					t.Errorf("code = %d, want %d (%v)", code, tt.want.code, err)
				}
				if tt.want.code == 401 && !apierrors.IsUnauthorized(err) {
					t.Errorf("error is not apierrors.IsUnauthorized: %v", err)
				}
				if !strings.Contains(err.Error(), tt.want.message) {
					t.Errorf("error %q does not contain %q", err.Error(), tt.want.message)
				}
				if strings.Contains(err.Error(), "bob-token") {
					t.Errorf("error leaks the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if caller.Method != tt.want.method || caller.Token != tt.want.token {
				t.Errorf("method, token = %q, %q; want %q, %q", caller.Method, caller.Token, tt.want.method, tt.want.token)
			}
			got := &user.DefaultInfo{Name: caller.User.GetName(), UID: caller.User.GetUID(), Groups: caller.User.GetGroups(), Extra: caller.User.GetExtra()}
			if len(got.Extra) == 0 {
				got.Extra = nil
			}
			if !reflect.DeepEqual(got, tt.want.user) {
				t.Errorf("user = %#v\nwant   %#v", got, tt.want.user)
			}
		})
	}
}

// TestTokenReviewSpec checks what the proxy asks the upstream.
func TestTokenReviewSpec(t *testing.T) {
	reviews := newFakeTokenReviews(map[string]authenticationv1.UserInfo{"t": {Username: "bob"}})
	a, err := New(Config{TokenReviews: reviews.AuthenticationV1().TokenReviews(), WebhookRetryBackoff: noRetry})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AuthenticateRequest(request(nil, map[string]string{"Authorization": "Bearer t"})); err != nil {
		t.Fatal(err)
	}
	want := []authenticationv1.TokenReviewSpec{{Token: "t"}}
	if !reflect.DeepEqual(reviews.calls, want) {
		t.Errorf("TokenReview specs = %#v, want %#v (no audiences: the upstream's own)", reviews.calls, want)
	}
}

func TestTokenAudiences(t *testing.T) {
	tests := []struct {
		name           string
		reviewAuds     []string // status.audiences in the answer
		wantAuthorized bool
	}{
		{name: "answer without audiences means the requested ones", reviewAuds: nil, wantAuthorized: true},
		{name: "matching audience", reviewAuds: []string{"proxy", "other"}, wantAuthorized: true},
		{name: "foreign audience", reviewAuds: []string{"other"}, wantAuthorized: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reviews := newFakeTokenReviews(map[string]authenticationv1.UserInfo{"t": {Username: "bob"}})
			reviews.audiences = tt.reviewAuds
			a, err := New(Config{
				TokenReviews:        reviews.AuthenticationV1().TokenReviews(),
				APIAudiences:        authenticator.Audiences{"proxy"},
				WebhookRetryBackoff: noRetry,
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.AuthenticateRequest(request(nil, map[string]string{"Authorization": "Bearer t"}))
			if got := err == nil; got != tt.wantAuthorized {
				t.Fatalf("authenticated = %v (%v), want %v", got, err, tt.wantAuthorized)
			}
			if !tt.wantAuthorized && statusCode(t, err) != 401 {
				t.Errorf("want 401, got %v", err)
			}
			if got := reviews.calls[0].Audiences; !reflect.DeepEqual(got, []string{"proxy"}) {
				t.Errorf("TokenReview audiences = %v, want [proxy]", got)
			}
		})
	}
}

func TestTokenCache(t *testing.T) {
	users := map[string]authenticationv1.UserInfo{"good": {Username: "bob"}, "good2": {Username: "dave"}}
	auth := func(t *testing.T, a *Authenticator, token string) error {
		t.Helper()
		_, err := a.AuthenticateRequest(request(nil, map[string]string{"Authorization": "Bearer " + token}))
		return err
	}
	newAuth := func(t *testing.T, reviews *fakeTokenReviews, ttl, failureTTL time.Duration) *Authenticator {
		t.Helper()
		a, err := New(Config{
			TokenReviews:         reviews.AuthenticationV1().TokenReviews(),
			TokenCacheTTL:        ttl,
			TokenCacheFailureTTL: failureTTL,
			WebhookRetryBackoff:  noRetry,
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	t.Run("positive results are cached", func(t *testing.T) {
		reviews := newFakeTokenReviews(users)
		a := newAuth(t, reviews, 0, 0)
		for i := 0; i < 5; i++ {
			if err := auth(t, a, "good"); err != nil {
				t.Fatal(err)
			}
		}
		if n := reviews.callCount(); n != 1 {
			t.Errorf("5 requests with one valid token sent %d TokenReviews, want 1", n)
		}
		if err := auth(t, a, "good2"); err != nil {
			t.Fatal(err)
		}
		if n := reviews.callCount(); n != 2 {
			t.Errorf("a second token sent %d TokenReviews in total, want 2 (one per token)", n)
		}
	})
	t.Run("negative results are cached", func(t *testing.T) {
		reviews := newFakeTokenReviews(users)
		a := newAuth(t, reviews, 0, 0)
		for i := 0; i < 5; i++ {
			if err := auth(t, a, "bad"); err == nil || statusCode(t, err) != 401 {
				t.Fatalf("want 401, got %v", err)
			}
		}
		if n := reviews.callCount(); n != 1 {
			t.Errorf("5 requests with one invalid token sent %d TokenReviews, want 1", n)
		}
	})
	t.Run("entries expire", func(t *testing.T) {
		reviews := newFakeTokenReviews(users)
		a := newAuth(t, reviews, 50*time.Millisecond, 50*time.Millisecond)
		_ = auth(t, a, "good")
		_ = auth(t, a, "bad")
		time.Sleep(120 * time.Millisecond)
		_ = auth(t, a, "good")
		_ = auth(t, a, "bad")
		if n := reviews.callCount(); n != 4 {
			t.Errorf("after expiry: %d TokenReviews, want 4", n)
		}
	})
	t.Run("negative TTL disables caching", func(t *testing.T) {
		reviews := newFakeTokenReviews(users)
		a := newAuth(t, reviews, -1, -1)
		for i := 0; i < 3; i++ {
			_ = auth(t, a, "good")
			_ = auth(t, a, "bad")
		}
		if n := reviews.callCount(); n != 6 {
			t.Errorf("uncached: %d TokenReviews, want 6", n)
		}
	})
	t.Run("failures to reach the TokenReview API are 503 and not cached", func(t *testing.T) {
		for _, fail := range []error{
			apierrors.NewInternalError(errors.New("etcd is on fire")),
			apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", errors.New("RBAC")),
			errors.New("dial tcp 10.0.0.1:443: connect: connection refused"),
		} {
			reviews := newFakeTokenReviews(users)
			a := newAuth(t, reviews, 0, 0)
			reviews.setFail(fail)
			for i := 0; i < 2; i++ {
				err := auth(t, a, "good")
				if err == nil || statusCode(t, err) != 503 {
					t.Fatalf("%v: want 503, got %v", fail, err)
				}
				if !strings.Contains(err.Error(), "unable to verify bearer token") {
					t.Errorf("unexpected message %q", err.Error())
				}
			}
			if n := reviews.callCount(); n != 2 {
				t.Errorf("%v: %d TokenReviews, want 2 (failures are not cached)", fail, n)
			}
			reviews.setFail(nil)
			if err := auth(t, a, "good"); err != nil {
				t.Errorf("%v: after recovery: %v", fail, err)
			}
		}
	})
	t.Run("retries 5xx", func(t *testing.T) {
		reviews := newFakeTokenReviews(users)
		a, err := New(Config{
			TokenReviews:        reviews.AuthenticationV1().TokenReviews(),
			WebhookRetryBackoff: &wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3},
		})
		if err != nil {
			t.Fatal(err)
		}
		reviews.setFail(apierrors.NewInternalError(errors.New("boom")))
		if err := auth(t, a, "good"); err == nil || statusCode(t, err) != 503 {
			t.Fatalf("want 503, got %v", err)
		}
		if n := reviews.callCount(); n != 3 {
			t.Errorf("%d attempts, want 3 (retries on 500)", n)
		}
	})
}

// TestClientCAReload proves the client CA is read from the provider on every
// request: swapping the file's content changes who is trusted.
func TestClientCAReload(t *testing.T) {
	oldCA, newCA := newTestCA(t, "old"), newTestCA(t, "new")
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, oldCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	provider, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", file)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{ClientCA: provider})
	if err != nil {
		t.Fatal(err)
	}
	fromOld := oldCA.issue(t, certOpts{cn: "old-user"})
	fromNew := newCA.issue(t, certOpts{cn: "new-user"})

	if _, err := a.AuthenticateRequest(request(fromOld, nil)); err != nil {
		t.Fatalf("old CA before rotation: %v", err)
	}
	if _, err := a.AuthenticateRequest(request(fromNew, nil)); err == nil {
		t.Fatal("new CA trusted before rotation")
	}

	if err := os.WriteFile(file, newCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// What the provider's file watcher does on change.
	if err := provider.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}

	if c, err := a.AuthenticateRequest(request(fromNew, nil)); err != nil || c.User.GetName() != "new-user" {
		t.Fatalf("new CA after rotation: %v, %v", c, err)
	}
	if _, err := a.AuthenticateRequest(request(fromOld, nil)); err == nil {
		t.Fatal("old CA still trusted after rotation")
	}
}

// unloadedCA is a CA provider that has not loaded a bundle yet.
type unloadedCA struct {
	dynamiccertificates.CAContentProvider
}

func (unloadedCA) VerifyOptions() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }

func (unloadedCA) CurrentCABundleContent() []byte { return nil }

func TestClientCANotLoaded(t *testing.T) {
	ca := newTestCA(t, "ca")
	a, err := New(Config{ClientCA: unloadedCA{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.AuthenticateRequest(request(ca.issue(t, certOpts{cn: "alice"}), nil))
	if err == nil || statusCode(t, err) != 401 || !strings.Contains(err.Error(), "no client CA bundle is loaded") {
		t.Fatalf("want 401 naming the missing bundle, got %v", err)
	}
}
