//go:build !kind

package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

const (
	// proxyUser is the proxy's own identity upstream (framework.StartLocal).
	proxyUser = "kausality-proxy"
	// envtestAdmin is the identity of the test's own setup requests.
	envtestAdmin = "admin"
	// directSuffix marks the paths of requests a test sends straight to
	// kube-apiserver, to compare its answer with the proxy's.
	directSuffix = "-direct"
)

// attacker is a low-privilege identity: it may read and write ConfigMaps in
// its namespace and nothing else. Every attack runs as one.
type attacker struct {
	// user is the name kube-apiserver knows the identity by.
	user string
	// cert is the client certificate of a certificate identity.
	cert *tls.Certificate
	// token is the bearer token of a service-account identity.
	token string
	// direct is a certificate identity's configuration for kube-apiserver
	// itself, for what a caller may do there without the proxy.
	direct *rest.Config
}

// rawAuthHeader is the header line a raw HTTP/1.1 request of a token
// identity carries; a certificate identity authenticates in the handshake.
func (a attacker) rawAuthHeader() string {
	if a.token == "" {
		return ""
	}
	return "Authorization: Bearer " + a.token + "\r\n"
}

func (a attacker) kind() string {
	if a.cert != nil {
		return "cert"
	}
	return "token"
}

// header is the credential header of a token identity, plus extra.
func (a attacker) header(extra ...[2]string) http.Header {
	h := http.Header{}
	if a.token != "" {
		h.Set("Authorization", "Bearer "+a.token)
	}
	for _, kv := range extra {
		// Raw keys: the spelling goes on the wire as written.
		h[kv[0]] = append(h[kv[0]], kv[1])
	}
	return h
}

// attackFixture is a namespace with a certificate attacker and a
// service-account attacker in it.
type attackFixture struct {
	ns          string
	cert, token attacker
}

// attackerRules is all an attacker may do.
var attackerRules = []rbacv1.PolicyRule{{
	APIGroups: []string{""}, Resources: []string{"configmaps"},
	Verbs: []string{"get", "list", "watch", "create", "update", "patch"},
}}

func newAttackFixture(t *testing.T, extraRules ...rbacv1.PolicyRule) *attackFixture {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t, "attack")
	admin := directClient(t)
	certUser := "mallory-" + utilrand.String(5)
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "attacker"},
		Rules:      append(append([]rbacv1.PolicyRule(nil), attackerRules...), extraRules...),
	}, metav1.CreateOptions{})
	mustf(t, err, "role")
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "attacker"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "attacker"},
		Subjects: []rbacv1.Subject{
			{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: certUser},
			{Kind: "ServiceAccount", Namespace: ns, Name: "mallory"},
		},
	}, metav1.CreateOptions{})
	mustf(t, err, "binding")
	certCfg, err := env.CP.AddUser(certUser, nil)
	mustf(t, err, "user %s", certUser)
	token, err := env.CP.ServiceAccountToken(ctx, ns, "mallory")
	mustf(t, err, "service account token")
	f := &attackFixture{
		ns:    ns,
		cert:  attacker{user: certUser, cert: certOf(t, certCfg), direct: certCfg},
		token: attacker{user: "system:serviceaccount:" + ns + ":mallory", token: token},
	}
	// RBAC takes a moment to see new bindings; ask kube-apiserver before
	// the proxy is asked (it would cache a denial).
	for _, user := range []string{f.cert.user, f.token.user} {
		waitAllowed(t, user, "create", "configmaps", ns)
	}
	return f
}

// waitAllowed waits until kube-apiserver allows user verb on resource in ns.
func waitAllowed(t *testing.T, user, verb, resource, ns string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s may %s %s", user, verb, resource), func() error {
		groups := []string{"system:authenticated"}
		if strings.HasPrefix(user, "system:serviceaccount:") {
			groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+ns)
		}
		sar, err := directClient(t).AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: resource, Namespace: ns},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return errors.New("not yet allowed")
		}
		return nil
	})
}

// proxyClient is an HTTP/1.1 client to the proxy with a's certificate.
func (a attacker) proxyClient(t *testing.T) *http.Client {
	t.Helper()
	return rawClient(t, a.cert)
}

// directHTTPClient is an HTTP/1.1 client straight to kube-apiserver that
// presents cert (when not nil).
func directHTTPClient(t *testing.T, cert *tls.Certificate) *http.Client {
	t.Helper()
	return forcedCertClient(t, env.CP.CAData, cert)
}

// forcedCertClient is an HTTP/1.1 client to a server whose certificate
// caPEM verifies. It presents cert whatever CAs the server asks for: Go
// would otherwise leave out a certificate from a CA the server does not
// name, and the attack would never be made.
func forcedCertClient(t *testing.T, caPEM []byte, cert *tls.Certificate) *http.Client {
	t.Helper()
	cfg, err := framework.TLSConfig(caPEM, nil)
	mustf(t, err, "TLS config")
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: cfg,
			TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// directURL is kube-apiserver's base URL, without a trailing slash.
func directURL() string { return strings.TrimSuffix(env.CP.Host, "/") }

// sendRaw sends one request to base+path (path as written: no cleaning, no
// re-escaping) and returns the code and the body.
func sendRaw(t *testing.T, c *http.Client, base, method, path, contentType string, body []byte, header http.Header) (int, []byte) {
	t.Helper()
	u, err := url.Parse(base + path)
	mustf(t, err, "URL %s", path)
	req, err := http.NewRequest(method, u.String(), strings.NewReader(string(body)))
	mustf(t, err, "request")
	req.URL = u
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, vs := range header {
		req.Header[k] = append(req.Header[k], vs...)
	}
	resp, err := c.Do(req)
	mustf(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// expectOnlyCaller proves with kube-apiserver's audit log that every
// request about marker that reached it since start ran as one of callers:
// never as the proxy itself, never as anyone the proxy impersonated on its
// own account, never in system:masters. A positive control (a request by
// the test to a marked path) makes "nothing else" mean something.
func expectOnlyCaller(t *testing.T, start time.Time, marker string, callers ...string) {
	t.Helper()
	control := marker + "-control"
	admin := certOf(t, env.CP.AdminConfig)
	resp, err := directHTTPClient(t, admin).Do(mustRequest(t, http.MethodGet, directURL()+"/api/v1/namespaces/"+control+"/configmaps"))
	mustf(t, err, "control request")
	resp.Body.Close()
	waitAudited(t, control)
	allowed := map[string]bool{}
	for _, c := range callers {
		allowed[c] = true
	}
	bad := auditedSince(t, start, func(e auditv1.Event) bool {
		// RequestReceived is logged before impersonation is applied: the
		// proxy's own name then stands for whoever it impersonates.
		if e.Stage == auditv1.StageRequestReceived || !mentions(e, marker) || strings.Contains(e.RequestURI, control) {
			return false
		}
		// The test's own requests straight to kube-apiserver: its setup
		// as the envtest admin, and the comparisons ("-direct").
		if e.User.Username == envtestAdmin || strings.Contains(e.RequestURI, directSuffix) {
			return false
		}
		effective, groups := e.User.Username, e.User.Groups
		if e.ImpersonatedUser != nil {
			effective, groups = e.ImpersonatedUser.Username, e.ImpersonatedUser.Groups
		}
		if e.User.Username == proxyUser && e.ImpersonatedUser == nil {
			return true
		}
		if allowed[effective] {
			return false
		}
		for _, g := range groups {
			if g == "system:masters" {
				return true
			}
		}
		// kube-apiserver audits a request it could not authenticate
		// with an empty user: it ran as nobody.
		return effective != "" && !allowed[effective]
	})
	if len(bad) > 0 {
		t.Fatalf("kube-apiserver ran requests about %s as someone other than %v:%s", marker, callers, describeEvents(bad))
	}
}

func mentions(e auditv1.Event, marker string) bool {
	if strings.Contains(e.RequestURI, marker) {
		return true
	}
	return e.ObjectRef != nil && (strings.Contains(e.ObjectRef.Name, marker) || strings.Contains(e.ObjectRef.Namespace, marker))
}

func mustRequest(t *testing.T, method, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	mustf(t, err, "request %s", u)
	return req
}

// forbiddenFor is the part of kube-apiserver's 403 that names who it saw.
func forbiddenFor(user string) string { return fmt.Sprintf("User %q cannot", user) }

// proxyAddr is the proxy's host:port.
func proxyAddr(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(cluster.ProxyEndpoint().URL)
	mustf(t, err, "proxy URL")
	return u.Host
}
