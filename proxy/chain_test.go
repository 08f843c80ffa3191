package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

// These tests drive the whole serving chain against a fake upstream that
// answers TokenReviews and SubjectAccessReviews and records every other
// request it receives. They pin down exactly which identity headers leave
// the proxy, for plain and upgrade requests; the e2e tests prove the same
// against a real kube-apiserver.

const (
	goodToken  = "good-token"
	proxyToken = "proxy-own-token"
)

type recorded struct {
	method, path string
	header       http.Header
}

type fakeUpstream struct {
	srv     *httptest.Server
	release chan struct{}

	mu       sync.Mutex
	reviews  int
	requests []recorded
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	f := &fakeUpstream{release: make(chan struct{})}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if serveProxyOwnState(w, r) {
		return
	}
	switch r.URL.Path {
	case "/readyz":
		_, _ = io.WriteString(w, "ok")
		return
	case "/api/v1/namespaces/kausality-system":
		// The proxy's own readiness check of its namespace, not a
		// caller's traffic.
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kausality-system"}}`)
		return
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		f.mu.Lock()
		f.reviews++
		f.mu.Unlock()
		var review authnv1.TokenReview
		decodeReview(r, &review)
		if review.Spec.Token == goodToken {
			review.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "token-user", UID: "tu-1", Groups: []string{"team-a"}}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
		return
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		f.mu.Lock()
		f.reviews++
		f.mu.Unlock()
		var sar authzv1.SubjectAccessReview
		decodeReview(r, &sar)
		// token-user may impersonate exactly the user "jane".
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "token-user" && ra != nil && ra.Resource == "users" && ra.Name == "jane"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sar)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/apis/kausality.io/") || strings.HasPrefix(r.URL.Path, "/apis/kausal.io/") {
		// The proxy's own watches of its approval and allowance policies run from its
		// start, whoever calls; they are not a caller's traffic. An empty
		// list, then a watch that stays open with no events, as on a
		// cluster without policies.
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			_, _ = w.Write([]byte(`{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`))
			return
		}
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// The proxy is ready only once these caches synced.
			writeInitialEventsEnd(w, r)
		} else {
			w.WriteHeader(http.StatusOK)
			_ = http.NewResponseController(w).Flush()
		}
		<-r.Context().Done()
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, recorded{method: r.Method, path: r.URL.Path, header: r.Header.Clone()})
	f.mu.Unlock()
	switch {
	case r.URL.Path == "/api/v1/namespaces/ns/configmaps/slow" || strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/ns/pods/slow/"):
		// Held until the test releases it (or gives up).
		select {
		case <-f.release:
		case <-time.After(30 * time.Second):
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"slow"}}`)
	case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/ns/pods/redirect/"):
		// An upgrade kube-apiserver answers with a redirect.
		http.Redirect(w, r, "https://elsewhere.invalid/exec", http.StatusFound)
	case r.Header.Get("Upgrade") != "":
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\nhello")
		_ = buf.Flush()
	case r.URL.Query().Get("watch") == "true":
		// A watch that sends an event, then another after the proxy's
		// request timeout has passed.
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}}`+"\n")
		_ = http.NewResponseController(w).Flush()
		if r.URL.Query().Get("hold") == "true" {
			<-r.Context().Done() // until the proxy goes away
			return
		}
		time.Sleep(1500 * time.Millisecond)
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b"}}}`+"\n")
	case r.URL.Path == "/redirect":
		http.Redirect(w, r, "https://elsewhere.invalid/", http.StatusFound)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	}
}

// decodeReview decodes a review in whatever format client-go sent it
// (protobuf by default for built-in types).
func decodeReview(r *http.Request, into runtime.Object) {
	raw, _ := io.ReadAll(r.Body)
	_, _, _ = scheme.Codecs.UniversalDeserializer().Decode(raw, nil, into)
}

func (f *fakeUpstream) take() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.requests
	f.requests = nil
	return r
}

type testCA struct{ *testpki.CA }

func newTestCA(t *testing.T, cn string) *testCA { return &testCA{testpki.NewCA(t, cn)} }

func (ca *testCA) clientCert(t *testing.T, cn string, orgs ...string) tls.Certificate {
	return ca.ClientCert(t, cn, orgs...)
}

type chainFixture struct {
	metrics  string
	stop     func()
	pool     *x509.CertPool
	upstream *fakeUpstream
	url      string
	client   func(cert *tls.Certificate) *http.Client
	ca       *testCA
}

func startChain(t *testing.T, customize ...func(*Options)) *chainFixture {
	t.Helper()
	up := newFakeUpstream(t)
	ca := newTestCA(t, "client-ca")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	upstreamCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.srv.Certificate().Raw})

	o := NewOptions()
	o.UpstreamConfig = &rest.Config{Host: up.srv.URL, BearerToken: proxyToken, TLSClientConfig: rest.TLSClientConfig{CAData: upstreamCA}}
	o.ClientCAFile = caFile
	o.SecureServing.ServerCert.CertDirectory = filepath.Join(dir, "certs")
	var err error
	o.SecureServing.Listener, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.MetricsListener, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range customize {
		c(o)
	}
	cfg, err := o.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)

	servingCertFile := o.SecureServing.ServerCert.CertKey.CertFile
	if servingCertFile == "" {
		servingCertFile = filepath.Join(o.SecureServing.ServerCert.CertDirectory, o.SecureServing.ServerCert.PairName+".crt")
	}
	servingCA, err := os.ReadFile(servingCertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(servingCA)
	return &chainFixture{
		metrics:  "http://" + srv.MetricsAddr().String(),
		stop:     stop,
		pool:     pool,
		upstream: up,
		url:      "https://" + srv.SecureAddr().String(),
		ca:       ca,
		client: func(cert *tls.Certificate) *http.Client {
			cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
			if cert != nil {
				cfg.Certificates = []tls.Certificate{*cert}
			}
			// HTTP/1.1: the cases send Connection headers HTTP/2 forbids.
			return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: cfg, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
			}}
		},
	}
}

// identityHeaders are all outbound headers that could carry identity.
func identityHeaders(h http.Header) map[string][]string {
	out := map[string][]string{}
	for k, v := range h {
		lk := strings.ToLower(k)
		if lk == "authorization" || strings.HasPrefix(lk, "impersonate-") || strings.HasPrefix(lk, "x-remote-") ||
			strings.HasPrefix(lk, "x-forwarded-") || lk == "forwarded" || lk == "connection" {
			vs := slices.Clone(v)
			slices.Sort(vs)
			out[http.CanonicalHeaderKey(k)] = vs
		}
	}
	return out
}

func TestChainForwardsExactIdentity(t *testing.T) {
	f := startChain(t)
	alice := f.ca.clientCert(t, "alice", "devs")
	mallory := newTestCA(t, "other").clientCert(t, "mallory", "system:masters")

	bearer := "Bearer " + goodToken
	proxyBearer := "Bearer " + proxyToken
	aliceIdentity := map[string][]string{
		"Authorization":     {proxyBearer},
		"Impersonate-User":  {"alice"},
		"Impersonate-Group": {"devs"},
	}
	tokenIdentity := map[string][]string{"Authorization": {bearer}}

	cases := []struct {
		name     string
		cert     *tls.Certificate
		header   map[string]string
		wantCode int
		want     map[string][]string // outbound identity headers; nil when nothing may be forwarded
	}{
		{name: "cert caller", cert: &alice, want: aliceIdentity},
		{name: "cert caller spoofs X-Remote-*", cert: &alice, header: map[string]string{"X-Remote-User": "root", "x-remote-group": "system:masters", "X-Remote-Extra-Scopes": "all"}, want: aliceIdentity},
		{name: "cert caller spoofs X-Forwarded-*", cert: &alice, header: map[string]string{"X-Forwarded-For": "10.1.1.1", "X-Forwarded-User": "root", "Forwarded": "for=10.1.1.1"}, want: aliceIdentity},
		{name: "cert caller sends a bearer token too", cert: &alice, header: map[string]string{"Authorization": bearer}, want: aliceIdentity},
		{name: "cert caller hides impersonation behind Connection", cert: &alice, header: map[string]string{"Connection": "Impersonate-User, Impersonate-Group, Authorization"}, want: aliceIdentity},
		{name: "cert caller impersonates without permission", cert: &alice, header: map[string]string{"Impersonate-User": "system:admin"}, wantCode: 403},
		{name: "cert from another CA", cert: &mallory, wantCode: 401},
		{name: "token caller", header: map[string]string{"Authorization": bearer}, want: tokenIdentity},
		{name: "token caller spoofs X-Remote-User", header: map[string]string{"Authorization": bearer, "X-Remote-User": "root"}, want: tokenIdentity},
		{name: "token caller drops Authorization via Connection", header: map[string]string{"Authorization": bearer, "Connection": "Authorization"}, want: tokenIdentity},
		{name: "token caller impersonates jane (allowed)", header: map[string]string{"Authorization": bearer, "Impersonate-User": "jane"},
			want: map[string][]string{"Authorization": {bearer}, "Impersonate-User": {"jane"}}},
		{name: "token caller impersonates system:admin", header: map[string]string{"Authorization": bearer, "Impersonate-User": "system:admin"}, wantCode: 403},
		{name: "token caller impersonates a group", header: map[string]string{"Authorization": bearer, "Impersonate-User": "jane", "Impersonate-Group": "system:masters"}, wantCode: 403},
		{name: "token caller impersonates an extra", header: map[string]string{"Authorization": bearer, "Impersonate-User": "jane", "Impersonate-Extra-Scopes": "all"}, wantCode: 403},
		{name: "bad token", header: map[string]string{"Authorization": "Bearer nope"}, wantCode: 401},
		{name: "no credentials", wantCode: 401},
		{name: "no credentials, spoofed X-Remote-User", header: map[string]string{"X-Remote-User": "root", "X-Remote-Group": "system:masters"}, wantCode: 401},
	}
	for _, upgrade := range []bool{false, true} {
		for _, tc := range cases {
			name := tc.name
			if upgrade {
				name = "upgrade/" + name
			}
			t.Run(name, func(t *testing.T) {
				f.upstream.take()
				req, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/ns/pods/p/exec", nil)
				if !upgrade {
					req.URL.Path = "/api/v1/namespaces/ns/configmaps"
				}
				for k, v := range tc.header {
					req.Header[k] = []string{v}
				}
				if upgrade {
					conn := "Upgrade"
					if c := tc.header["Connection"]; c != "" {
						conn = c + ", Upgrade"
					}
					req.Header.Set("Connection", conn)
					req.Header.Set("Upgrade", "SPDY/3.1")
				}
				resp, err := f.client(tc.cert).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				got := f.upstream.take()
				if tc.wantCode != 0 {
					if resp.StatusCode != tc.wantCode {
						t.Fatalf("code %d, want %d: %s", resp.StatusCode, tc.wantCode, body)
					}
					var s metav1.Status
					if err := json.Unmarshal(body, &s); err != nil || s.Kind != "Status" || int(s.Code) != tc.wantCode || s.Message == "" {
						t.Fatalf("not a proper Status (%v): %s", err, body)
					}
					if len(got) != 0 {
						t.Fatalf("a rejected request reached the upstream: %+v", got)
					}
					return
				}
				wantCode := http.StatusOK
				if upgrade {
					wantCode = http.StatusSwitchingProtocols
				}
				if resp.StatusCode != wantCode {
					t.Fatalf("code %d, want %d: %s", resp.StatusCode, wantCode, body)
				}
				if len(got) != 1 {
					t.Fatalf("upstream saw %d requests, want 1", len(got))
				}
				want := map[string][]string{}
				for k, v := range tc.want {
					want[k] = v
				}
				if upgrade {
					want["Connection"] = []string{"Upgrade"}
				}
				gotIdentity := identityHeaders(got[0].header)
				delete(gotIdentity, "X-Forwarded-For") // UpgradeAwareHandler appends the proxy's peer; not identity for kube-apiserver
				// kube-apiserver's x509 authenticator records which certificate
				// was used; the proxy carries that into the audit trail.
				const credentialID = "Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id"
				if tc.cert != nil {
					if v := gotIdentity[credentialID]; len(v) != 1 || !strings.HasPrefix(v[0], "X509SHA256=") {
						t.Fatalf("cert caller's credential id not forwarded: %v", gotIdentity)
					}
					delete(gotIdentity, credentialID)
				}
				if !equalHeaders(gotIdentity, want) {
					t.Fatalf("outbound identity headers\n got %v\nwant %v", gotIdentity, want)
				}
			})
		}
	}
}

func equalHeaders(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestChainRejectsUpstreamRedirects(t *testing.T) {
	f := startChain(t)
	req, _ := http.NewRequest(http.MethodGet, f.url+"/redirect", nil)
	req.Header.Set("Authorization", "Bearer "+goodToken)
	resp, err := f.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Location") != "" {
		t.Fatalf("got %d (Location %q): %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	var s metav1.Status
	if err := json.Unmarshal(body, &s); err != nil || s.Code != 502 || !strings.Contains(s.Message, "redirect") {
		t.Fatalf("status %s", body)
	}
}

// Unauthenticated requests are answered before any upstream round trip: not
// even a TokenReview is sent when there is no credential to review.
func TestChainNoCredentialsNoUpstreamTraffic(t *testing.T) {
	f := startChain(t)
	f.upstream.mu.Lock()
	before := f.upstream.reviews
	f.upstream.mu.Unlock()
	resp, err := f.client(nil).Get(f.url + "/api/v1/secrets")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("code %d", resp.StatusCode)
	}
	f.upstream.mu.Lock()
	defer f.upstream.mu.Unlock()
	if f.upstream.reviews != before || len(f.upstream.requests) != 0 {
		t.Fatalf("upstream saw %d reviews and %d requests", f.upstream.reviews-before, len(f.upstream.requests))
	}
}

func listenLocal() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func TestChainServesHTTP2(t *testing.T) {
	f := startChain(t)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pool}, ForceAttemptHTTP2: true}}
	req, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/ns/configmaps", nil)
	req.Header.Set("Authorization", "Bearer "+goodToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %d", resp.Proto, resp.StatusCode)
	}
}

// Watches are long-running: they outlive --request-timeout and stream each
// event as it comes. Ordinary requests are cut off with a 504 Status.
func TestChainRequestTimeoutSparesLongRunning(t *testing.T) {
	f := startChain(t, func(o *Options) { o.RequestTimeout = time.Second })
	client := f.client(nil)

	req, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/ns/configmaps?watch=true", nil)
	req.Header.Set("Authorization", "Bearer "+goodToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || strings.Count(string(data), `"type":"ADDED"`) != 2 {
		t.Fatalf("watch cut short (%v): %s", err, data)
	}

	req, _ = http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/ns/configmaps/slow", nil)
	req.Header.Set("Authorization", "Bearer "+goodToken)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var s metav1.Status
	if resp.StatusCode != http.StatusGatewayTimeout || json.Unmarshal(data, &s) != nil || s.Reason != metav1.StatusReasonTimeout {
		t.Fatalf("slow request: %d %s", resp.StatusCode, data)
	}
}

// Shutdown drains: a request in flight when the server is told to stop
// completes; new connections are refused.
func TestChainGracefulShutdownDrains(t *testing.T) {
	f := startChain(t)
	client := f.client(nil)
	result := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/ns/configmaps/slow", nil)
		req.Header.Set("Authorization", "Bearer "+goodToken)
		resp, err := client.Do(req)
		if err != nil {
			result <- -1
			return
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		result <- resp.StatusCode
	}()
	// Wait until the request has reached the upstream.
	for i := 0; ; i++ {
		f.upstream.mu.Lock()
		n := len(f.upstream.requests)
		f.upstream.mu.Unlock()
		if n > 0 {
			break
		}
		if i > 500 {
			t.Fatal("request never reached the upstream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A watch is open too; it never becomes idle.
	watchReq, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/ns/configmaps?watch=true&hold=true", nil)
	watchReq.Header.Set("Authorization", "Bearer "+goodToken)
	watch, err := f.client(nil).Do(watchReq)
	if err != nil {
		t.Fatal(err)
	}
	watchEnded := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, watch.Body); watch.Body.Close(); close(watchEnded) }()

	stopped := make(chan struct{})
	go func() { f.stop(); close(stopped) }()
	// Long-running requests end as soon as shutdown starts, so that the
	// drain does not wait for watches (clients re-establish them).
	select {
	case <-watchEnded:
	case <-time.After(30 * time.Second):
		t.Fatal("an open watch kept the proxy from shutting down")
	}
	// The listener closes first; the in-flight request is still served.
	for i := 0; ; i++ {
		if _, err := tls.Dial("tcp", strings.TrimPrefix(f.url, "https://"), &tls.Config{RootCAs: f.pool}); err != nil {
			break
		}
		if i > 500 {
			t.Fatal("the proxy kept accepting connections while shutting down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(f.upstream.release)
	if code := <-result; code != http.StatusOK {
		t.Fatalf("in-flight request during shutdown: %d", code)
	}
	<-stopped
}

// An upstream host written with a trailing slash (as envtest and some
// kubeconfigs do) still gets probed at /readyz, so the proxy becomes ready.
func TestChainReadyWithTrailingSlashUpstream(t *testing.T) {
	f := startChain(t, func(o *Options) { o.UpstreamConfig.Host += "/" })
	for i := 0; ; i++ {
		resp, err := http.Get(f.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if i > 300 {
			t.Fatalf("/readyz never became ready (last %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// As kube-apiserver does, an HTTP/2 connection carries no more than the one
// request of a caller without credentials (the server sends GOAWAY), while
// an authenticated caller keeps its connection.
func TestChainEndsUnauthenticatedHTTP2Connections(t *testing.T) {
	f := startChain(t)
	for _, tc := range []struct {
		name      string
		token     string
		wantDials int
	}{
		{"without credentials", "", 2},
		{"authenticated", goodToken, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dials atomic.Int32
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pool}, ForceAttemptHTTP2: true}
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}
			defer tr.CloseIdleConnections()
			c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
			for range 2 {
				req, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/ns/configmaps", nil)
				if tc.token != "" {
					req.Header.Set("Authorization", "Bearer "+tc.token)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Fatalf("served over %s", resp.Proto)
				}
				// Let the GOAWAY arrive before the next request picks a
				// connection.
				time.Sleep(200 * time.Millisecond)
			}
			if got := int(dials.Load()); got != tc.wantDials {
				t.Errorf("%d connections for two requests, want %d", got, tc.wantDials)
			}
		})
	}
}
