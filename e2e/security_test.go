package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

// selfSubjectReviewPath answers "who am I" for any authenticated caller, so
// it shows which identity the upstream saw.
const selfSubjectReviewPath = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

func whoAmI(t *testing.T, c *http.Client, header http.Header) (int, string, []string) {
	t.Helper()
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	req, err := http.NewRequest(http.MethodPost, cluster.ProxyEndpoint().URL+selfSubjectReviewPath, strings.NewReader(body))
	mustf(t, err, "request")
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := c.Do(req)
	mustf(t, err, "whoami")
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return resp.StatusCode, string(data), nil
	}
	var r authnv1.SelfSubjectReview
	mustf(t, json.Unmarshal(data, &r), "decoding review")
	return resp.StatusCode, r.Status.UserInfo.Username, r.Status.UserInfo.Groups
}

func decodeStatus(t *testing.T, data []byte) metav1.Status {
	t.Helper()
	var s metav1.Status
	if err := json.Unmarshal(data, &s); err != nil || s.Kind != "Status" {
		t.Fatalf("not a metav1.Status (%v): %s", err, data)
	}
	return s
}

// A request that cannot be authenticated gets 401 and never reaches
// kube-apiserver: the audit log, which records every request the apiserver
// receives, has no trace of its unique path. A positive control proves the
// audit log would have shown it.
func TestUnauthenticatedRequestsSendNothingUpstream(t *testing.T) {
	otherCA := selfSignedClientCert(t, "mallory")
	cases := []struct {
		name   string
		client *http.Client
		header http.Header
		want   string
	}{
		{name: "no credentials", client: rawClient(t, nil), want: "Unauthorized"},
		{name: "bad bearer token", client: rawClient(t, nil), header: http.Header{"Authorization": {"Bearer not-a-real-token"}}, want: "Unauthorized"},
		{name: "certificate from another CA", client: rawClient(t, &otherCA), want: "Unauthorized"},
		{name: "spoofed front-proxy headers only", client: rawClient(t, nil), header: http.Header{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}}, want: "Unauthorized"},
	}
	marker := "zero-bytes-" + utilrand.String(6)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := fmt.Sprintf("/api/v1/namespaces/%s-%d/configmaps", marker, i)
			req, err := http.NewRequest(http.MethodGet, cluster.ProxyEndpoint().URL+path, nil)
			mustf(t, err, "request")
			for k, vs := range tc.header {
				req.Header[k] = vs
			}
			resp, err := tc.client.Do(req)
			mustf(t, err, "request")
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("got %d, want 401: %s", resp.StatusCode, data)
			}
			if s := decodeStatus(t, data); string(s.Reason) != tc.want || s.Code != 401 || s.Message == "" {
				t.Fatalf("status %+v", s)
			}
		})
	}
	// Positive control: an authenticated request to a marked path shows up.
	cfg, err := cluster.UserThroughProxy("auditor", "system:masters")
	mustf(t, err, "user")
	controlPath := fmt.Sprintf("/api/v1/namespaces/%s-control/configmaps", marker)
	req, _ := http.NewRequest(http.MethodGet, cluster.ProxyEndpoint().URL+controlPath, nil)
	resp, err := rawClient(t, certOf(t, cfg)).Do(req)
	mustf(t, err, "control request")
	resp.Body.Close()

	eventually(t, 30*time.Second, "control request in audit log", func() error {
		events, err := cluster.AuditEvents()
		if err != nil {
			return err
		}
		found := false
		for _, e := range events {
			if strings.Contains(e.RequestURI, marker+"-control") {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("control request not audited yet")
		}
		for _, e := range events {
			if strings.Contains(e.RequestURI, marker) && !strings.Contains(e.RequestURI, marker+"-control") {
				t.Fatalf("a rejected request reached kube-apiserver: %s by %s", e.RequestURI, e.User.Username)
			}
		}
		return nil
	})
}

// A low-privilege caller cannot become anyone else by any header trick.
func TestIdentityCannotBeSpoofed(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "spoof")
	saCfg, err := cluster.ServiceAccountThroughProxy(ctx, ns, "lowly")
	mustf(t, err, "service account")
	saUser := "system:serviceaccount:" + ns + ":lowly"
	certCfg, err := cluster.UserThroughProxy("carol") // no groups, no RBAC
	mustf(t, err, "cert user")

	tokenClient := rawClient(t, nil)
	certClient := rawClient(t, certOf(t, certCfg))
	bearer := http.Header{"Authorization": {"Bearer " + saCfg.BearerToken}}
	with := func(base http.Header, kv ...string) http.Header {
		h := http.Header{}
		for k, v := range base {
			h[k] = append([]string(nil), v...)
		}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}

	cases := []struct {
		name     string
		client   *http.Client
		header   http.Header
		wantCode int    // for rejected requests
		wantUser string // for accepted requests: who the upstream saw
	}{
		{name: "token: plain", client: tokenClient, header: bearer, wantUser: saUser},
		{name: "token: Impersonate-User system:admin", client: tokenClient, header: with(bearer, "Impersonate-User", "system:admin"), wantCode: 403},
		{name: "token: Impersonate-User + Impersonate-Group system:masters", client: tokenClient, header: with(bearer, "Impersonate-User", saUser, "Impersonate-Group", "system:masters"), wantCode: 403},
		{name: "token: Impersonate-Group alone", client: tokenClient, header: with(bearer, "Impersonate-Group", "system:masters"), wantCode: 400},
		{name: "token: Impersonate-Uid", client: tokenClient, header: with(bearer, "Impersonate-User", saUser, "Impersonate-Uid", "1234"), wantCode: 403},
		{name: "token: Impersonate-Extra-scopes", client: tokenClient, header: with(bearer, "Impersonate-User", saUser, "Impersonate-Extra-Scopes", "everything"), wantCode: 403},
		{name: "token: lower-case impersonate-user", client: tokenClient, header: with(bearer, "impersonate-user", "system:admin"), wantCode: 403},
		{name: "token: X-Remote-User and X-Remote-Group", client: tokenClient, header: with(bearer, "X-Remote-User", "system:admin", "X-Remote-Group", "system:masters", "X-Remote-Extra-Scopes", "all"), wantUser: saUser},
		{name: "token: X-Forwarded-For and Forwarded", client: tokenClient, header: with(bearer, "X-Forwarded-For", "10.0.0.1", "X-Forwarded-User", "system:admin", "Forwarded", "for=10.0.0.1"), wantUser: saUser},
		{name: "token: Connection names Authorization", client: tokenClient, header: with(bearer, "Connection", "Authorization"), wantUser: saUser},
		{name: "token: Connection names Impersonate-User", client: tokenClient, header: with(bearer, "Connection", "Impersonate-User", "Impersonate-User", "system:admin"), wantCode: 403},
		{name: "cert: plain", client: certClient, wantUser: "carol"},
		{name: "cert: Impersonate-User system:admin", client: certClient, header: http.Header{"Impersonate-User": {"system:admin"}}, wantCode: 403},
		{name: "cert: Impersonate-Group system:masters", client: certClient, header: http.Header{"Impersonate-User": {"carol"}, "Impersonate-Group": {"system:masters"}}, wantCode: 403},
		// The proxy impersonates cert callers with its own, stronger
		// credentials. If a Connection header could strip the Impersonate-*
		// headers the proxy sets, the request would run as the proxy.
		{name: "cert: Connection names Impersonate-User and Impersonate-Group", client: certClient, header: http.Header{"Connection": {"Impersonate-User, Impersonate-Group, Impersonate-Uid"}}, wantUser: "carol"},
		{name: "cert: X-Remote-User", client: certClient, header: http.Header{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}}, wantUser: "carol"},
		{name: "cert: extra bearer token of the service account", client: certClient, header: bearer, wantUser: "carol"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, user, groups := whoAmI(t, tc.client, tc.header)
			if tc.wantCode != 0 {
				if code != tc.wantCode {
					t.Fatalf("got %d (%s), want %d", code, user, tc.wantCode)
				}
				decodeStatus(t, []byte(user))
				return
			}
			if code != http.StatusCreated {
				t.Fatalf("got %d: %s", code, user)
			}
			if user != tc.wantUser {
				t.Fatalf("upstream saw %q (groups %v), want %q", user, groups, tc.wantUser)
			}
			for _, g := range groups {
				if g == "system:masters" {
					t.Fatalf("upstream saw group system:masters for %s", user)
				}
			}
		})
	}

	// And the cert caller really is held to its own permissions upstream:
	// the proxy's identity may read secrets, carol may not.
	req, _ := http.NewRequest(http.MethodGet, cluster.ProxyEndpoint().URL+"/api/v1/namespaces/"+ns+"/secrets", nil)
	req.Header.Set("Connection", "Impersonate-User")
	resp, err := certClient.Do(req)
	mustf(t, err, "list secrets")
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("carol listed secrets through the proxy: %d", resp.StatusCode)
	}
}

// An impersonation the caller is allowed to do (RBAC verb impersonate) is
// applied: the upstream sees the impersonated user.
func TestAuthorizedImpersonationIsApplied(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "imp")
	admin := clientFor(t, cluster.Direct())
	saCfg, err := cluster.ServiceAccountThroughProxy(ctx, ns, "impersonator")
	mustf(t, err, "service account")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "impersonate-jane-" + ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"jane"}}},
	}
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	mustf(t, err, "role")
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "impersonator"}},
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	mustf(t, err, "binding")
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})

	header := http.Header{"Authorization": {"Bearer " + saCfg.BearerToken}, "Impersonate-User": {"jane"}}
	eventually(t, 30*time.Second, "impersonating jane", func() error {
		code, user, _ := whoAmI(t, rawClient(t, nil), header)
		if code != http.StatusCreated || user != "jane" {
			return fmt.Errorf("got %d %s", code, user)
		}
		return nil
	})
	// but not john
	header.Set("Impersonate-User", "john")
	if code, _, _ := whoAmI(t, rawClient(t, nil), header); code != http.StatusForbidden {
		t.Fatalf("impersonating john: %d, want 403", code)
	}
}

// selfSignedClientCert makes a client certificate signed by a CA the proxy
// does not trust.
func selfSignedClientCert(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	return (*testpki.CA)(nil).ClientCert(t, cn, "system:masters")
}
