package authn

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
)

var (
	aliceUser = &user.DefaultInfo{
		Name:   "alice",
		Groups: []string{"dev", "system:authenticated", "ops"},
		Extra:  map[string][]string{credentialIDKey: {"X509SHA256=abcd"}},
	}
	x509Alice = &Caller{User: aliceUser, Method: MethodX509}
	bobUser   = &user.DefaultInfo{Name: "bob", UID: "bob-uid", Groups: []string{"team", "system:authenticated"},
		Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"pod-1"}}}
	tokenBob   = &Caller{User: bobUser, Method: MethodToken, Token: "bob-token"}
	anonUser   = &user.DefaultInfo{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}
	anonCaller = &Caller{User: anonUser, Method: MethodAnonymous}
	janeUser   = &user.DefaultInfo{Name: "jane", Groups: []string{"system:authenticated"}, Extra: map[string][]string{}}
	builderSA  = &user.DefaultInfo{Name: "system:serviceaccount:ns1:builder",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"}}
)

// aliceOut is what the upstream must see for x509 alice acting as herself.
func aliceOut(extra http.Header) http.Header {
	h := http.Header{
		"Impersonate-User":  {"alice"},
		"Impersonate-Group": {"dev", "ops"},
		"Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id": {"X509SHA256=abcd"},
	}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

var benign = http.Header{
	"Accept":          {"application/json, */*"},
	"User-Agent":      {"kube-controller-manager/v1.35.4"},
	"Content-Type":    {"application/json"},
	"Accept-Encoding": {"gzip"},
}

func withBenign(h http.Header) http.Header {
	out := benign.Clone()
	for k, v := range h {
		out[k] = v
	}
	return out
}

// TestHeaderHygiene pushes inbound headers through SanitizeInbound and
// ApplyUpstreamIdentity, in that order (as the proxy does), and asserts the
// exact outbound header set.
func TestHeaderHygiene(t *testing.T) {
	tests := []struct {
		name      string
		in        http.Header
		caller    *Caller
		effective user.Info // nil: caller.User
		want      http.Header
		wantProxy bool
	}{
		{
			name:   "x509: benign headers survive, identity is impersonated",
			in:     benign,
			caller: x509Alice, want: withBenign(aliceOut(nil)), wantProxy: true,
		},
		{
			name: "x509: spoofed front-proxy and forwarding headers, any case",
			in: withBenign(http.Header{
				"X-Remote-User":           {"admin"},
				"x-remote-group":          {"system:masters"},
				"X-REMOTE-EXTRA-Scopes":   {"all"},
				"X-Remote-Uid":            {"0"},
				"X-Forwarded-For":         {"10.0.0.1"},
				"x-forwarded-proto":       {"https"},
				"X-Forwarded-Host":        {"kubernetes.default"},
				"X-Forwarded-Client-Cert": {"Hash=abc;Subject=\"CN=admin\""},
				"Forwarded":               {"for=10.0.0.1;proto=https"},
				"X-Real-Ip":               {"10.0.0.1"},
				"x-real-ip":               {"10.0.0.2"},
			}),
			caller: x509Alice, want: withBenign(aliceOut(nil)), wantProxy: true,
		},
		{
			name: "x509: caller's raw Impersonate-* never reach the upstream",
			in: withBenign(http.Header{
				"Impersonate-User":             {"system:admin"},
				"Impersonate-Group":            {"system:masters"},
				"Impersonate-Uid":              {"0"},
				"Impersonate-Extra-Scopes":     {"cluster-admin"},
				"impersonate-extra-reason":     {"because"},
				"IMPERSONATE-USER":             {"root"},
				"Impersonate-Something-Future": {"x"},
			}),
			caller: x509Alice, want: withBenign(aliceOut(nil)), wantProxy: true,
		},
		{
			name:   "x509: a caller Authorization header is dropped; proxy credentials are used",
			in:     withBenign(http.Header{"Authorization": {"Bearer stolen-token"}, "authorization": {"Basic YWRtaW46YWRtaW4="}}),
			caller: x509Alice, want: withBenign(aliceOut(nil)), wantProxy: true,
		},
		{
			name: "x509: Connection: Impersonate-User, Authorization cannot remove what we set",
			in: withBenign(http.Header{
				"Connection":       {"Impersonate-User, Authorization"},
				"Impersonate-User": {"system:admin"},
				"Authorization":    {"Bearer stolen-token"},
			}),
			caller: x509Alice, want: withBenign(aliceOut(nil)), wantProxy: true,
		},
		{
			name: "x509: hop-by-hop headers named in Connection (any case) are removed",
			in: withBenign(http.Header{
				"Connection":       {"keep-alive, X-Hop"},
				"connection":       {"x-other-hop"},
				"Keep-Alive":       {"timeout=5"},
				"X-Hop":            {"1"},
				"x-other-hop":      {"2"},
				"Proxy-Connection": {"keep-alive"},
				"X-End-To-End":     {"kept"},
			}),
			caller: x509Alice, want: withBenign(aliceOut(http.Header{"X-End-To-End": {"kept"}})), wantProxy: true,
		},
		{
			name:   "x509: proxy credentials headers are removed",
			in:     withBenign(http.Header{"Proxy-Authorization": {"Basic eDp5"}, "proxy-authorization": {"Basic eDp6"}}),
			caller: x509Alice, want: withBenign(aliceOut(nil)), wantProxy: true,
		},
		{
			name: "x509 upgrade: Connection: Upgrade and Upgrade survive, smuggled names do not",
			in: withBenign(http.Header{
				"Connection":                {"Upgrade, Impersonate-User"},
				"Upgrade":                   {"SPDY/3.1"},
				"X-Stream-Protocol-Version": {"v5.channel.k8s.io"},
				"Impersonate-User":          {"system:admin"},
			}),
			caller: x509Alice,
			want: withBenign(aliceOut(http.Header{
				"Connection":                {"Upgrade"},
				"Upgrade":                   {"SPDY/3.1"},
				"X-Stream-Protocol-Version": {"v5.channel.k8s.io"},
			})),
			wantProxy: true,
		},
		{
			name: "websocket upgrade: bearer subprotocol is removed, others kept",
			in: withBenign(http.Header{
				"connection":             {"upgrade"},
				"upgrade":                {"websocket"},
				"Sec-Websocket-Key":      {"dGhlIHNhbXBsZSBub25jZQ=="},
				"Sec-Websocket-Version":  {"13"},
				"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.c3RvbGVu, v5.channel.k8s.io", "channel.k8s.io"},
			}),
			caller: x509Alice,
			want: withBenign(aliceOut(http.Header{
				"Connection":             {"Upgrade"},
				"Upgrade":                {"websocket"},
				"Sec-Websocket-Key":      {"dGhlIHNhbXBsZSBub25jZQ=="},
				"Sec-Websocket-Version":  {"13"},
				"Sec-Websocket-Protocol": {"v5.channel.k8s.io", "channel.k8s.io"},
			})),
			wantProxy: true,
		},
		{
			name:      "websocket: a lone bearer subprotocol removes the header",
			in:        http.Header{"Sec-Websocket-Protocol": {"BASE64URL.BEARER.AUTHORIZATION.K8S.IO.c3RvbGVu"}},
			caller:    x509Alice,
			want:      aliceOut(nil),
			wantProxy: true,
		},
		{
			name:      "Upgrade without Connection: upgrade is dropped",
			in:        withBenign(http.Header{"Upgrade": {"websocket"}}),
			caller:    x509Alice,
			want:      withBenign(aliceOut(nil)),
			wantProxy: true,
		},
		{
			name:      "Connection: Upgrade without an Upgrade header is dropped",
			in:        withBenign(http.Header{"Connection": {"Upgrade"}}),
			caller:    x509Alice,
			want:      withBenign(aliceOut(nil)),
			wantProxy: true,
		},
		{
			name: "token: own token passed through, spoofed headers stripped, no proxy credentials",
			in: withBenign(http.Header{
				"Authorization":   {"Bearer bob-token"},
				"X-Remote-User":   {"admin"},
				"X-Forwarded-For": {"1.2.3.4"},
			}),
			caller:    tokenBob,
			want:      withBenign(http.Header{"Authorization": {"Bearer bob-token"}}),
			wantProxy: false,
		},
		{
			name: "token: extra Authorization spellings cannot ride along",
			in: withBenign(http.Header{
				"Authorization": {"Bearer bob-token", "Bearer other"},
				"authorization": {"Bearer admin-token"},
			}),
			caller:    tokenBob,
			want:      withBenign(http.Header{"Authorization": {"Bearer bob-token"}}),
			wantProxy: false,
		},
		{
			name: "token: Connection: Authorization cannot strip the token",
			in: withBenign(http.Header{
				"Connection":    {"Authorization"},
				"Authorization": {"Bearer bob-token"},
			}),
			caller:    tokenBob,
			want:      withBenign(http.Header{"Authorization": {"Bearer bob-token"}}),
			wantProxy: false,
		},
		{
			name: "token: raw Impersonate-User: system:admin is not forwarded when not authorized",
			in: withBenign(http.Header{
				"Authorization":    {"Bearer bob-token"},
				"Impersonate-User": {"system:admin"},
			}),
			caller:    tokenBob,
			want:      withBenign(http.Header{"Authorization": {"Bearer bob-token"}}),
			wantProxy: false,
		},
		{
			name: "token: authorized impersonation is re-encoded next to the token",
			in: withBenign(http.Header{
				"Authorization":            {"Bearer bob-token"},
				"Impersonate-User":         {"jane"},
				"Impersonate-Extra-Scopes": {"smuggled"},
			}),
			caller:    tokenBob,
			effective: janeUser,
			want: withBenign(http.Header{
				"Authorization":    {"Bearer bob-token"},
				"Impersonate-User": {"jane"},
			}),
			wantProxy: false,
		},
		{
			name:      "token: impersonating a service account with its own groups sends none, kube-apiserver adds them",
			in:        http.Header{"Authorization": {"Bearer bob-token"}},
			caller:    tokenBob,
			effective: builderSA,
			want: http.Header{
				"Authorization":    {"Bearer bob-token"},
				"Impersonate-User": {"system:serviceaccount:ns1:builder"},
			},
			wantProxy: false,
		},
		{
			name:      "token: impersonating a service account with other groups sends them explicitly",
			in:        http.Header{"Authorization": {"Bearer bob-token"}},
			caller:    tokenBob,
			effective: &user.DefaultInfo{Name: "system:serviceaccount:ns1:builder", Groups: []string{"system:serviceaccounts", "system:authenticated"}},
			want: http.Header{
				"Authorization":     {"Bearer bob-token"},
				"Impersonate-User":  {"system:serviceaccount:ns1:builder"},
				"Impersonate-Group": {"system:serviceaccounts", "system:authenticated"},
			},
			wantProxy: false,
		},
		{
			name:      "anonymous: impersonated as system:anonymous with proxy credentials",
			in:        withBenign(http.Header{"Authorization": {"Basic YWRtaW46YWRtaW4="}, "X-Remote-User": {"admin"}}),
			caller:    anonCaller,
			want:      withBenign(http.Header{"Impersonate-User": {"system:anonymous"}}),
			wantProxy: true,
		},
		{
			name:   "x509 acting as an impersonated user with uid and escaped extras",
			in:     benign,
			caller: x509Alice,
			effective: &user.DefaultInfo{
				Name: "jane", UID: "jane-uid", Groups: []string{"viewers", "system:authenticated"},
				Extra: map[string][]string{"example.com/team": {"a", "b"}, "scopes": {"read"}, "100%": {"x"}, "with space": {"y"}},
			},
			want: withBenign(http.Header{
				"Impersonate-User":                     {"jane"},
				"Impersonate-Uid":                      {"jane-uid"},
				"Impersonate-Group":                    {"viewers"},
				"Impersonate-Extra-Example.com%2fteam": {"a", "b"},
				"Impersonate-Extra-Scopes":             {"read"},
				"Impersonate-Extra-100%25":             {"x"},
				"Impersonate-Extra-With%20space":       {"y"},
			}),
			wantProxy: true,
		},
		{
			name:      "x509 with system:unauthenticated keeps both implicit groups explicit",
			in:        nil,
			caller:    x509Alice,
			effective: &user.DefaultInfo{Name: "odd", Groups: []string{"system:unauthenticated", "system:authenticated"}},
			want: http.Header{
				"Impersonate-User":  {"odd"},
				"Impersonate-Group": {"system:unauthenticated", "system:authenticated"},
			},
			wantProxy: true,
		},
		{
			name:      "x509 service-account CN without groups still pins the groups",
			in:        nil,
			caller:    x509Alice,
			effective: &user.DefaultInfo{Name: "system:serviceaccount:ns1:builder"},
			want: http.Header{
				"Impersonate-User":  {"system:serviceaccount:ns1:builder"},
				"Impersonate-Group": {"system:authenticated"},
			},
			wantProxy: true,
		},
		{
			name:      "fail closed: empty effective user name sets nothing, no proxy credentials",
			in:        withBenign(http.Header{"Impersonate-User": {"system:admin"}, "Authorization": {"Bearer x"}}),
			caller:    x509Alice,
			effective: &user.DefaultInfo{Name: "", Groups: []string{"system:masters"}},
			want:      benign,
			wantProxy: false,
		},
		{
			name:      "fail closed: token caller without a token",
			in:        withBenign(http.Header{"Authorization": {"Bearer x"}}),
			caller:    &Caller{User: bobUser, Method: MethodToken},
			want:      benign,
			wantProxy: false,
		},
		{
			name:      "fail closed: unknown method",
			in:        benign,
			caller:    &Caller{User: bobUser, Method: "kerberos"},
			want:      benign,
			wantProxy: false,
		},
		{
			name:      "fail closed: nil caller",
			in:        withBenign(http.Header{"Impersonate-User": {"system:admin"}}),
			caller:    nil,
			effective: aliceUser,
			want:      benign,
			wantProxy: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.in.Clone()
			if h == nil {
				h = http.Header{}
			}
			effective := tt.effective
			if effective == nil && tt.caller != nil {
				effective = tt.caller.User
			}
			SanitizeInbound(h)
			gotProxy := ApplyUpstreamIdentity(h, tt.caller, effective)
			if gotProxy != tt.wantProxy {
				t.Errorf("useProxyCredentials = %v, want %v", gotProxy, tt.wantProxy)
			}
			if !reflect.DeepEqual(h, tt.want) {
				t.Errorf("outbound headers:\n%s\nwant:\n%s", dumpHeader(h), dumpHeader(tt.want))
			}
		})
	}
}

func dumpHeader(h http.Header) string {
	var b strings.Builder
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}) {
		b.WriteString("  " + k + ": " + strings.Join(h[k], " | ") + "\n")
	}
	return b.String()
}

// TestUpstreamIdentityRoundTrip feeds what ApplyUpstreamIdentity writes to
// k8s.io/apiserver's own impersonation filter (what kube-apiserver runs) and
// demands that it reconstructs exactly the effective user.
func TestUpstreamIdentityRoundTrip(t *testing.T) {
	allowAll := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	proxySA := &user.DefaultInfo{Name: "system:serviceaccount:kausality:proxy", Groups: []string{"system:authenticated"}}
	users := []*user.DefaultInfo{
		aliceUser,
		anonUser,
		janeUser,
		builderSA,
		{Name: "system:serviceaccount:ns1:builder", Groups: []string{"viewers", "system:authenticated"}},
		{Name: "system:serviceaccount:ns1:builder", Groups: []string{"system:authenticated"}},
		{Name: "system:anonymous", Groups: []string{"system:unauthenticated", "viewers"}},
		{Name: "system:anonymous", Groups: []string{"system:unauthenticated", "system:authenticated"}},
		{Name: "odd", Groups: []string{"system:unauthenticated"}},
		{Name: "odd", Groups: []string{"system:unauthenticated", "system:authenticated", "x"}},
		{Name: "jane", UID: "u-1", Groups: []string{"a", "b", "system:authenticated"},
			Extra: map[string][]string{"example.com/team": {"a", "b"}, "100%": {"x"}, "with space": {"y"}, "ünïcode/key": {"z"}}},
		{Name: "system:node:node-1", Groups: []string{"system:nodes", "system:authenticated"}},
	}
	for _, u := range users {
		t.Run(u.Name+"/"+strings.Join(u.Groups, ","), func(t *testing.T) {
			h := http.Header{}
			if !ApplyUpstreamIdentity(h, &Caller{User: u, Method: MethodX509}, u) {
				t.Fatal("x509 caller must use proxy credentials")
			}
			var got user.Info
			handler := impersonation.WithImpersonation(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got, _ = genericrequest.UserFrom(r.Context())
			}), allowAll, scheme.Codecs)
			req := httptest.NewRequest(http.MethodGet, "/api", nil)
			req.Header = h
			req = req.WithContext(genericrequest.WithUser(req.Context(), proxySA))
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("upstream rejected %v: %d %s", h, rec.Code, rec.Body.String())
			}
			if !sameUser(got, u) {
				t.Fatalf("upstream sees %#v\nwant           %#v\nheaders:\n%s", got, u, dumpHeader(h))
			}
		})
	}
}

// TestReverseProxyOrdering shows, with a real httputil.ReverseProxy, why the
// identity headers are set in Rewrite: a Director's headers are subject to
// the caller's Connection header, Rewrite's are not.
func TestReverseProxyOrdering(t *testing.T) {
	var seen http.Header
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)

	send := func(t *testing.T, proxy http.Handler, headers http.Header) http.Header {
		t.Helper()
		front := httptest.NewServer(proxy)
		defer front.Close()
		req, _ := http.NewRequest(http.MethodGet, front.URL+"/api/v1/pods", nil)
		req.Header = headers.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return seen
	}
	attack := http.Header{
		"Connection":       {"Impersonate-User, Impersonate-Group, Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id, Authorization"},
		"Impersonate-User": {"system:admin"},
		"Authorization":    {"Bearer stolen"},
		"X-Remote-User":    {"admin"},
		"X-Forwarded-For":  {"10.0.0.1"},
	}

	t.Run("Rewrite: identity survives the Connection header", func(t *testing.T) {
		rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			SanitizeInbound(pr.Out.Header)
			ApplyUpstreamIdentity(pr.Out.Header, x509Alice, aliceUser)
		}}
		got := send(t, rp, attack)
		for k, v := range aliceOut(nil) {
			if !reflect.DeepEqual(got[k], v) {
				t.Errorf("upstream %s = %v, want %v", k, got[k], v)
			}
		}
		for _, k := range []string{"Authorization", "X-Remote-User", "X-Forwarded-For", "Connection"} {
			if v, ok := got[k]; ok {
				t.Errorf("upstream got %s: %v", k, v)
			}
		}
	})
	t.Run("Director (unsafe, for contrast): the caller deletes our headers", func(t *testing.T) {
		// A Director that sets the identity headers without first
		// consuming the Connection header: ReverseProxy removes the
		// headers it names after the Director ran, so the request would
		// reach the upstream on the proxy's credentials with no
		// impersonation at all, i.e. as the proxy itself.
		rp := &httputil.ReverseProxy{Director: func(r *http.Request) { //nolint:staticcheck // the test shows why a Director must not set identity
			r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
			ApplyUpstreamIdentity(r.Header, x509Alice, aliceUser)
		}}
		got := send(t, rp, attack)
		if v, ok := got["Impersonate-User"]; ok {
			t.Fatalf("expected ReverseProxy to drop Impersonate-User after the Director; upstream got %v", v)
		}
	})
	t.Run("Rewrite keeps an upgrade's Connection and Upgrade", func(t *testing.T) {
		var upstreamReq http.Header
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				SanitizeInbound(pr.Out.Header)
				ApplyUpstreamIdentity(pr.Out.Header, x509Alice, aliceUser)
				upstreamReq = pr.Out.Header.Clone()
			},
			Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
			}),
		}
		send(t, rp, http.Header{"Connection": {"Upgrade, Impersonate-User"}, "Upgrade": {"websocket"}, "Impersonate-User": {"root"}})
		if upstreamReq.Get("Connection") != "Upgrade" || upstreamReq.Get("Upgrade") != "websocket" || upstreamReq.Get("Impersonate-User") != "alice" {
			t.Fatalf("upgrade headers not preserved: %v", upstreamReq)
		}
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestApplyUpstreamIdentityAlone checks the defence in depth: even on a
// header nobody sanitized, ApplyUpstreamIdentity leaves no caller-supplied
// Authorization or Impersonate-* next to the proxy's credentials.
func TestApplyUpstreamIdentityAlone(t *testing.T) {
	h := http.Header{
		"Authorization":            {"Bearer stolen"},
		"authorization":            {"Bearer stolen-2"},
		"impersonate-user":         {"system:admin"},
		"Impersonate-Group":        {"system:masters"},
		"Impersonate-Extra-Scopes": {"x"},
		"Accept":                   {"application/json"},
	}
	if !ApplyUpstreamIdentity(h, x509Alice, aliceUser) {
		t.Fatal("x509 caller must use proxy credentials")
	}
	if want := aliceOut(http.Header{"Accept": {"application/json"}}); !reflect.DeepEqual(h, want) {
		t.Fatalf("headers:\n%s\nwant:\n%s", dumpHeader(h), dumpHeader(want))
	}
}
