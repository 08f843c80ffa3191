//go:build !kind

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

// Every attack here runs as a low-privilege identity (attackFixture: it may
// touch ConfigMaps in one namespace). Each case asserts the exact answer,
// and kube-apiserver's audit log shows that nothing about the attack ran
// upstream as anyone but the attacker.

// What an attack is expected to end in.
const (
	// seenAsCaller: forwarded, and kube-apiserver refused it naming the
	// attacker: the identity upstream was the caller's, nothing more.
	seenAsCaller = "caller"
	// impersonationDenied: the proxy refused the Impersonate-* headers.
	impersonationDenied = "impersonation denied"
	// badImpersonation: the proxy refused malformed Impersonate-* headers.
	badImpersonation = "bad impersonation"
)

// TestAttackIdentityHeaders: identity headers in every spelling, duplicated,
// empty, or named in Connection to make an intermediary drop the proxy's
// own. The request lists Secrets in a namespace named after the case, which
// the attacker may not: kube-apiserver's 403 names the user it saw.
func TestAttackIdentityHeaders(t *testing.T) {
	f := newAttackFixture(t)
	start := time.Now().Add(-time.Second)
	marker := "atk-hdr-" + utilrand.String(5)
	const self = "$SELF"
	cases := []struct {
		name   string
		header [][2]string
		want   string
	}{
		{"lower-case impersonate-user", [][2]string{{"impersonate-user", "system:admin"}}, impersonationDenied},
		{"upper-case IMPERSONATE-USER", [][2]string{{"IMPERSONATE-USER", "system:admin"}}, impersonationDenied},
		{"mixed-case iMpErSoNaTe-UsEr", [][2]string{{"iMpErSoNaTe-UsEr", "system:admin"}}, impersonationDenied},
		{"Impersonate-User with padding", [][2]string{{"Impersonate-User", "  system:admin  "}}, impersonationDenied},
		{"Impersonate-User of oneself", [][2]string{{"Impersonate-User", self}}, impersonationDenied},
		{"oneself with lower-case impersonate-group system:masters", [][2]string{{"Impersonate-User", self}, {"impersonate-group", "system:masters"}}, impersonationDenied},
		{"upper-case IMPERSONATE-GROUP without a user", [][2]string{{"IMPERSONATE-GROUP", "system:masters"}}, badImpersonation},
		{"mixed-case Impersonate-uid", [][2]string{{"Impersonate-User", "system:admin"}, {"Impersonate-uid", "0"}}, impersonationDenied},
		{"upper-case IMPERSONATE-EXTRA-SCOPES", [][2]string{{"Impersonate-User", self}, {"IMPERSONATE-EXTRA-SCOPES", "everything"}}, impersonationDenied},
		{"lower-case impersonate-extra- with an escaped key", [][2]string{{"Impersonate-User", self}, {"impersonate-extra-example.com%2fscopes", "all"}}, impersonationDenied},
		{"Impersonate-Extra without a user", [][2]string{{"Impersonate-Extra-Scopes", "all"}}, badImpersonation},
		{"Impersonate-Uid without a user", [][2]string{{"Impersonate-Uid", "0"}}, badImpersonation},
		{"two Impersonate-User headers", [][2]string{{"Impersonate-User", self}, {"Impersonate-User", "system:admin"}}, badImpersonation},
		{"Impersonate-User in two spellings", [][2]string{{"impersonate-user", self}, {"IMPERSONATE-USER", "system:admin"}}, badImpersonation},
		{"two Impersonate-Uid headers", [][2]string{{"Impersonate-User", "system:admin"}, {"Impersonate-Uid", "1"}, {"impersonate-uid", "2"}}, badImpersonation},
		{"empty Impersonate-User", [][2]string{{"Impersonate-User", ""}}, seenAsCaller},
		{"empty Impersonate-Uid", [][2]string{{"Impersonate-Uid", ""}}, seenAsCaller},
		{"empty Impersonate-User with Impersonate-Group system:masters", [][2]string{{"Impersonate-User", ""}, {"Impersonate-Group", "system:masters"}}, badImpersonation},
		{"empty Impersonate-Group", [][2]string{{"Impersonate-Group", ""}}, badImpersonation},
		{"Connection names lower-case impersonate-user, which is set", [][2]string{{"Connection", "impersonate-user"}, {"impersonate-user", "system:admin"}}, impersonationDenied},
		{"Connection names every Impersonate header", [][2]string{{"Connection", "Impersonate-User, IMPERSONATE-GROUP, impersonate-uid, Impersonate-Extra-Scopes"}}, seenAsCaller},
		{"two Connection headers naming Authorization and Impersonate-User", [][2]string{{"Connection", "keep-alive, Authorization"}, {"connection", "Impersonate-User"}}, seenAsCaller},
		{"X-Remote-User and X-Remote-Group", [][2]string{{"X-Remote-User", "system:admin"}, {"X-Remote-Group", "system:masters"}}, seenAsCaller},
		{"lower-case x-remote-* with an extra", [][2]string{{"x-remote-user", "system:admin"}, {"x-remote-group", "system:masters"}, {"x-remote-extra-scopes", "all"}}, seenAsCaller},
		{"upper-case X-REMOTE-USER named in Connection", [][2]string{{"Connection", "X-Remote-User"}, {"X-REMOTE-USER", "system:admin"}}, seenAsCaller},
		{"X-Forwarded-For, -Host, -Proto and -User", [][2]string{{"X-Forwarded-For", "10.0.0.1"}, {"X-Forwarded-Host", "kubernetes.default.svc"}, {"X-Forwarded-Proto", "https"}, {"X-Forwarded-User", "system:admin"}}, seenAsCaller},
		{"lower-case x-forwarded-user and -groups", [][2]string{{"x-forwarded-user", "system:admin"}, {"x-forwarded-groups", "system:masters"}}, seenAsCaller},
		{"Forwarded and X-Real-Ip", [][2]string{{"Forwarded", "for=127.0.0.1;by=system:admin"}, {"X-Real-Ip", "127.0.0.1"}}, seenAsCaller},
	}
	for _, who := range []attacker{f.cert, f.token} {
		for i, tc := range cases {
			t.Run(who.kind()+"/"+tc.name, func(t *testing.T) {
				var header [][2]string
				for _, kv := range tc.header {
					header = append(header, [2]string{kv[0], strings.ReplaceAll(kv[1], self, who.user)})
				}
				path := "/api/v1/namespaces/" + marker + "-" + who.kind() + "-" + strconv.Itoa(i) + "/secrets"
				code, body := sendRaw(t, who.proxyClient(t), cluster.ProxyEndpoint().URL, http.MethodGet, path, "", nil, who.header(header...))
				expectAttackOutcome(t, code, body, tc.want, who.user)
			})
		}
	}
	expectOnlyCaller(t, start, marker, f.cert.user, f.token.user)
}

// expectAttackOutcome checks an answer against what the case expects.
func expectAttackOutcome(t *testing.T, code int, body []byte, want, user string) {
	t.Helper()
	switch want {
	case seenAsCaller:
		if code != http.StatusForbidden {
			t.Fatalf("code %d, want kube-apiserver's 403 for %s: %s", code, user, body)
		}
		if s := decodeStatus(t, body); !strings.Contains(s.Message, forbiddenFor(user)) {
			t.Fatalf("kube-apiserver did not see %s: %s", user, s.Message)
		}
	case impersonationDenied:
		if code != http.StatusForbidden {
			t.Fatalf("code %d, want 403: %s", code, body)
		}
		if s := decodeStatus(t, body); !strings.Contains(s.Message, "cannot impersonate") || !strings.Contains(s.Message, user) {
			t.Fatalf("not the impersonation denial for %s: %s", user, s.Message)
		}
	case badImpersonation:
		if code != http.StatusBadRequest {
			t.Fatalf("code %d, want 400: %s", code, body)
		}
		if s := decodeStatus(t, body); s.Reason != metav1.StatusReasonBadRequest || !strings.Contains(s.Message, "Impersonate") {
			t.Fatalf("status %s %q does not say what is wrong with the Impersonate headers", s.Reason, s.Message)
		}
	case "unauthorized":
		if code != http.StatusUnauthorized {
			t.Fatalf("code %d, want 401: %s", code, body)
		}
		if s := decodeStatus(t, body); s.Reason != metav1.StatusReasonUnauthorized {
			t.Fatalf("status %+v", s)
		}
	default:
		t.Fatalf("unknown expectation %q", want)
	}
}

// TestAttackBearerTokens: tokens that are empty, malformed, for another
// audience, or of a service account that no longer exists (never seen by
// the proxy, and seen while it existed, so that the proxy's TokenReview
// cache still holds it). Each is also sent straight to kube-apiserver: the
// proxy's answer is kube-apiserver's.
func TestAttackBearerTokens(t *testing.T) {
	ctx := context.Background()
	f := newAttackFixture(t)
	admin := directClient(t)
	start := time.Now().Add(-time.Second)
	marker := "atk-tok-" + utilrand.String(5)

	otherAudience, err := admin.CoreV1().ServiceAccounts(f.ns).CreateToken(ctx, "mallory", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"https://vault.example.com"}, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	mustf(t, err, "token for another audience")
	gone := func(name string) string {
		token, err := env.CP.ServiceAccountToken(ctx, f.ns, name)
		mustf(t, err, "token of %s", name)
		return token
	}
	unseen, cached := gone("deleted-unseen"), gone("deleted-cached")
	cachedUser := "system:serviceaccount:" + f.ns + ":deleted-cached"
	// The proxy reviews the cached one while it is valid.
	code, body := sendRaw(t, rawClient(t, nil), cluster.ProxyEndpoint().URL, http.MethodGet, "/api/v1/namespaces/"+marker+"-warm/secrets", "", nil,
		http.Header{"Authorization": {"Bearer " + cached}})
	if code != http.StatusForbidden {
		t.Fatalf("warming the token cache: %d %s", code, body)
	}
	for _, name := range []string{"deleted-unseen", "deleted-cached"} {
		mustf(t, admin.CoreV1().ServiceAccounts(f.ns).Delete(ctx, name, metav1.DeleteOptions{}), "deleting %s", name)
	}
	// kube-apiserver looks service accounts up in its own cache.
	eventually(t, 30*time.Second, "kube-apiserver rejects the tokens of the deleted service accounts", func() error {
		for _, token := range []string{unseen, cached} {
			code, _ := sendRaw(t, directHTTPClient(t, nil), directURL(), http.MethodGet, "/api/v1/namespaces/"+marker+"-wait/secrets", "", nil,
				http.Header{"Authorization": {"Bearer " + token}})
			if code != http.StatusUnauthorized {
				return fmt.Errorf("still %d", code)
			}
		}
		return nil
	})

	cases := []struct {
		name          string
		authorization []string
		want          string
	}{
		{"Bearer with no token", []string{"Bearer "}, "unauthorized"},
		{"Bearer without a space", []string{"Bearer"}, "unauthorized"},
		{"lower-case bearer with garbage", []string{"bearer not-a-token"}, "unauthorized"},
		{"a malformed JWT", []string{"Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJzeXN0ZW06YWRtaW4ifQ."}, "unauthorized"},
		{"Basic credentials", []string{"Basic YWRtaW46YWRtaW4="}, "unauthorized"},
		{"a token for another audience", []string{"Bearer " + otherAudience.Status.Token}, "unauthorized"},
		{"a token of a deleted service account", []string{"Bearer " + unseen}, "unauthorized"},
		{"a token of a deleted service account the proxy reviewed before", []string{"Bearer " + cached}, "unauthorized"},
		{"a valid token, then garbage", []string{"Bearer " + f.token.token, "Bearer garbage"}, seenAsCaller},
		{"garbage, then a valid token", []string{"Bearer garbage", "Bearer " + f.token.token}, "unauthorized"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := func(suffix string) string {
				return "/api/v1/namespaces/" + marker + "-" + strconv.Itoa(i) + suffix + "/secrets"
			}
			header := http.Header{"Authorization": tc.authorization}
			code, body := sendRaw(t, rawClient(t, nil), cluster.ProxyEndpoint().URL, http.MethodGet, path(""), "", nil, header)
			expectAttackOutcome(t, code, body, tc.want, f.token.user)
			direct, directBody := sendRaw(t, directHTTPClient(t, nil), directURL(), http.MethodGet, path(directSuffix), "", nil, header)
			expectSameAnswer(t, code, direct, directBody)
		})
	}
	expectOnlyCaller(t, start, marker, f.token.user, cachedUser)
}

// expectSameAnswer compares the proxy's answer with kube-apiserver's. The
// one deliberate difference: kube-apiserver lets a request without a
// usable credential in as system:anonymous, the proxy (without
// --anonymous-auth) answers 401.
func expectSameAnswer(t *testing.T, proxy, direct int, directBody []byte) {
	t.Helper()
	if proxy == http.StatusUnauthorized && direct == http.StatusForbidden && strings.Contains(decodeStatus(t, directBody).Message, forbiddenFor("system:anonymous")) {
		return
	}
	if proxy != direct {
		t.Fatalf("through the proxy %d, straight to kube-apiserver %d: %s", proxy, direct, directBody)
	}
}

// TestAttackClientCertificates: certificates from a foreign CA, expired,
// not yet valid, or for the wrong key usage, alone and next to a bearer
// token, and a valid certificate next to a token of another identity.
// Which credential counts is kube-apiserver's choice (a verified
// certificate first, a token when the certificate fails), checked by
// sending the same credentials to kube-apiserver itself.
func TestAttackClientCertificates(t *testing.T) {
	f := newAttackFixture(t)
	start := time.Now().Add(-time.Second)
	marker := "atk-cert-" + utilrand.String(5)
	trusted, err := env.ClientCA()
	mustf(t, err, "the client CA")
	issue := func(ca *testpki.CA, cn string, o testpki.Options) *tls.Certificate {
		o.CN, o.Orgs = cn, []string{"system:masters"}
		cert, key := ca.Issue(t, o)
		return &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
	}
	foreign := testpki.NewCA(t, "foreign")
	admin := "admin-" + utilrand.String(5)
	// A strong identity: a certificate in system:masters from the trusted CA.
	strong := issue(trusted, admin, testpki.Options{})
	cases := []struct {
		name  string
		cert  *tls.Certificate
		token string
		// user is who kube-apiserver must see; "" means 401.
		user string
	}{
		{"foreign CA", issue(foreign, "system:admin", testpki.Options{}), "", ""},
		{"expired", issue(trusted, "system:admin", testpki.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}), "", ""},
		{"not yet valid", issue(trusted, "system:admin", testpki.Options{NotBefore: time.Now().Add(24 * time.Hour), NotAfter: time.Now().Add(48 * time.Hour)}), "", ""},
		{"server-auth only", issue(trusted, "system:admin", testpki.Options{Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}), "", ""},
		{"foreign CA with the attacker's token", issue(foreign, "system:admin", testpki.Options{}), f.token.token, f.token.user},
		{"expired with the attacker's token", issue(trusted, "system:admin", testpki.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}), f.token.token, f.token.user},
		{"the attacker's certificate with a garbage token", f.cert.cert, "garbage", f.cert.user},
		{"the attacker's certificate with another identity's token", f.cert.cert, f.token.token, f.cert.user},
		{"a strong certificate with the attacker's token", strong, f.token.token, admin},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := func(suffix string) string {
				return "/api/v1/namespaces/" + marker + "-" + strconv.Itoa(i) + suffix + "/secrets"
			}
			header := http.Header{}
			if tc.token != "" {
				header.Set("Authorization", "Bearer "+tc.token)
			}
			code, body := sendRaw(t, forcedCertClient(t, cluster.ProxyEndpoint().CAData, tc.cert), cluster.ProxyEndpoint().URL, http.MethodGet, path(""), "", nil, header)
			direct, directBody := sendRaw(t, directHTTPClient(t, tc.cert), directURL(), http.MethodGet, path(directSuffix), "", nil, header)
			switch tc.user {
			case "":
				expectAttackOutcome(t, code, body, "unauthorized", "")
			case admin:
				// system:masters may list: the request went upstream as
				// the certificate's identity, the one kube-apiserver picks.
				if code != http.StatusOK {
					t.Fatalf("code %d, want 200 for %s: %s", code, admin, body)
				}
			default:
				expectAttackOutcome(t, code, body, seenAsCaller, tc.user)
			}
			expectSameAnswer(t, code, direct, directBody)
		})
	}
	expectOnlyCaller(t, start, marker, f.cert.user, f.token.user, admin)
}
