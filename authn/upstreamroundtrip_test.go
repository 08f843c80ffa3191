package authn

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
)

// upstreamSees runs h through k8s.io/apiserver's impersonation filter (what
// kube-apiserver runs) for a request authenticated as requester, with authz
// deciding the impersonation. It returns the user the upstream reconstructs
// and the status code.
func upstreamSees(t *testing.T, requester user.Info, h http.Header, authz authorizer.Authorizer) (user.Info, int) {
	t.Helper()
	var got user.Info
	handler := impersonation.WithImpersonation(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = genericrequest.UserFrom(r.Context())
	}), authz, scheme.Codecs)
	req := httptest.NewRequest(http.MethodGet, "/api", nil)
	req.Header = h.Clone() // the filter removes what it consumed
	req = req.WithContext(genericrequest.WithUser(req.Context(), requester))
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return got, rec.Code
}

var upstreamProxyUser = &user.DefaultInfo{Name: "system:serviceaccount:kausality:proxy", Groups: []string{"system:authenticated"}}

var upstreamAllowsAll = authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "", nil
})

// An impersonated extra key with upper-case letters (sent %-encoded,
// "Impersonate-Extra-%41dmin", which kube-apiserver decodes to "Admin") is
// authorized by the proxy as "Admin"; kube-apiserver lower-cases a header
// name before decoding it, so the key must reach it encoded, or the caller
// would get an extra key it was never authorized for ("admin").
func TestAnUpperCaseExtraKeyReachesTheUpstreamAsAuthorized(t *testing.T) {
	var reviewedKeys []string
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		switch {
		case a.GetResource() == "users" && a.GetName() == "jane":
			return authorizer.DecisionAllow, "", nil
		case a.GetResource() == "userextras" && a.GetSubresource() == "Admin":
			reviewedKeys = append(reviewedKeys, a.GetSubresource())
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "no", nil
	})
	a := &Authenticator{authz: authz}
	caller := &Caller{User: aliceUser, Method: MethodX509}
	in := http.Header{"Impersonate-User": {"jane"}, "Impersonate-Extra-%41dmin": {"true"}}

	// What kube-apiserver itself would make of these headers from alice.
	direct, code := upstreamSees(t, aliceUser, in.Clone(), authz)
	if code != http.StatusOK || len(direct.GetExtra()["Admin"]) != 1 {
		t.Fatalf("setup: direct upstream %d %#v", code, direct)
	}

	effective, err := a.ResolveImpersonation(context.Background(), caller, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateIdentity(effective); err != nil {
		t.Fatal(err)
	}
	out := in.Clone()
	SanitizeInbound(out)
	if !ApplyUpstreamIdentity(out, caller, effective) {
		t.Fatal("x509 caller must use proxy credentials")
	}
	got, code := upstreamSees(t, upstreamProxyUser, out, upstreamAllowsAll)
	if code != http.StatusOK {
		t.Fatalf("upstream rejected: %d", code)
	}
	for k := range got.GetExtra() {
		if !slices.Contains(reviewedKeys, k) {
			t.Errorf("upstream sees extra key %q, which the caller was never authorized to impersonate (reviewed: %q); headers: %v",
				k, reviewedKeys, out)
		}
	}
	if !sameUser(got, effective) {
		t.Errorf("upstream sees %#v, the proxy authorized %#v", got, effective)
	}
}

// A client certificate with CN=system:anonymous is an x509 user whose
// groups are exactly its O (the authenticated-group adder skips
// system:anonymous). Impersonated, kube-apiserver would add
// system:unauthenticated to it, a group the caller does not have: such a
// caller is refused, as an identity that cannot be passed on exactly.
func TestACertificateNamingSystemAnonymousIsRefused(t *testing.T) {
	ca := newTestCA(t, "client-ca")
	cert := ca.issue(t, certOpts{cn: "system:anonymous", orgs: []string{"devs"}})
	a, err := New(Config{ClientCA: ca.provider(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.AuthenticateRequest(request(cert, nil))
	if !apierrors.IsUnauthorized(err) {
		t.Fatalf("a certificate naming system:anonymous without system:unauthenticated: %v, want 401", err)
	}
	// The premise: kube-apiserver adds the group to such a user.
	h := http.Header{}
	setImpersonation(h, &user.DefaultInfo{Name: user.Anonymous, Groups: []string{"devs"}})
	got, code := upstreamSees(t, upstreamProxyUser, h, upstreamAllowsAll)
	if code != http.StatusOK || !slices.Contains(got.GetGroups(), user.AllUnauthenticated) {
		t.Fatalf("kube-apiserver's impersonation of system:anonymous: %d %v; the refusal may go", code, got)
	}
}

// A token caller allowed to impersonate a service account (and nothing
// else) is served: kube-apiserver checks the impersonation against the
// caller's own token, so the service account's implied groups are not
// sent as Impersonate-Group headers, which it would check as group
// impersonation.
func TestATokenCallerMayImpersonateAServiceAccountAlone(t *testing.T) {
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "bob" && a.GetVerb() == "impersonate" && a.GetResource() == "serviceaccounts" &&
			a.GetNamespace() == "ns1" && a.GetName() == "builder" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "no", nil
	})
	in := http.Header{"Impersonate-User": {"system:serviceaccount:ns1:builder"}}
	if _, code := upstreamSees(t, bobUser, in, authz); code != http.StatusOK {
		t.Fatalf("setup: kube-apiserver itself refuses: %d", code)
	}
	a := &Authenticator{authz: authz}
	effective, err := a.ResolveImpersonation(context.Background(), tokenBob, in)
	if err != nil {
		t.Fatalf("the proxy refuses: %v", err)
	}
	out := in.Clone()
	SanitizeInbound(out)
	if ApplyUpstreamIdentity(out, tokenBob, effective) {
		t.Fatal("token callers must not use proxy credentials")
	}
	// The upstream authenticates bob by his token, then checks the
	// impersonation headers against bob.
	if _, code := upstreamSees(t, bobUser, out, authz); code != http.StatusOK {
		t.Errorf("kube-apiserver refuses the proxy's re-encoding with %d; headers: %v", code, out)
	}
}
