package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// policyUpstream is a kube-apiserver stand-in that is healthy but answers
// the proxy's approval-policy lists (and the watches that stream them) only
// once told how, per resource: with 404 (the CRDs are not installed) or
// with an empty list.
type policyUpstream struct {
	srv *httptest.Server

	mu      sync.Mutex
	answers map[string]string // resource → "list" or "404"; absent: held
	// namespaceMissing answers the proxy's namespace with 404.
	namespaceMissing atomic.Bool
}

// answer makes the requests for resource answer how.
func (u *policyUpstream) answer(resource, how string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.answers[resource] = how
}

// await returns how the request for path is to be answered, once known.
func (u *policyUpstream) await(r *http.Request) string {
	for {
		u.mu.Lock()
		for resource, how := range u.answers {
			if strings.HasSuffix(r.URL.Path, "/"+resource) {
				u.mu.Unlock()
				return how
			}
		}
		u.mu.Unlock()
		select {
		case <-r.Context().Done():
			return ""
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func newPolicyUpstream(t *testing.T) *policyUpstream {
	u := &policyUpstream{answers: map[string]string{}}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if serveProxyOwnState(w, r) {
			return
		}
		switch {
		case r.URL.Path == "/readyz":
			_, _ = io.WriteString(w, "ok")
		case r.URL.Path == "/api/v1/namespaces/kausality-system":
			w.Header().Set("Content-Type", "application/json")
			if u.namespaceMissing.Load() {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"details":{"name":"kausality-system","kind":"namespaces"}}`)
				return
			}
			_, _ = io.WriteString(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kausality-system"}}`)
		case r.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","status":{"authenticated":true,"user":{"username":"writer"}}}`)
		case r.URL.Path == "/whole-answer":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"whole":true}`)
		case r.URL.Path == "/broken-answer":
			// The status line and half an answer, then the stream breaks,
			// as when kube-apiserver dies while answering.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"kind":"ConfigMap","apiVersion":"v1","meta`)
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		case strings.HasPrefix(r.URL.Path, "/apis/kausality.io/") && r.URL.Query().Get("watch") == "true" &&
			r.URL.Query().Get("sendInitialEvents") != "true":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done()
		case strings.HasPrefix(r.URL.Path, "/apis/kausality.io/"):
			// A list, or the watch that streams one (client-go's
			// informers ask for the initial events of a watch first).
			answer := u.await(r)
			if answer == "" {
				return
			}
			w.Header().Set("Content-Type", "application/json")
			if answer == "404" {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
				return
			}
			if r.URL.Query().Get("watch") == "true" {
				writeInitialEventsEnd(w, r)
				<-r.Context().Done()
				return
			}
			_, _ = io.WriteString(w, `{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	u.srv.EnableHTTP2 = true
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

// writeInitialEventsEnd answers a watch that asked for its initial events
// as kube-apiserver does when there are none: the bookmark that ends them.
func writeInitialEventsEnd(w http.ResponseWriter, r *http.Request) {
	kind := "ApprovalPolicy"
	if strings.Contains(r.URL.Path, "/clusterapprovalpolicies") {
		kind = "ClusterApprovalPolicy"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"kind":%q,"apiVersion":"kausality.io/v1alpha1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind)
	_ = http.NewResponseController(w).Flush()
}

// startServer runs a proxy in front of upstream and returns its metrics URL
// and its serving address.
func startServer(t *testing.T, upstream *httptest.Server) (metricsURL, addr string) {
	t.Helper()
	o := NewOptions()
	o.UpstreamConfig = &rest.Config{Host: upstream.URL, BearerToken: "proxy-token", TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw}),
	}}
	o.SecureServing.ServerCert.CertDirectory = filepath.Join(t.TempDir(), "certs")
	o.UpstreamProbeInterval = 50 * time.Millisecond
	var err error
	if o.SecureServing.Listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if o.MetricsListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + srv.MetricsAddr().String(), srv.SecureAddr().String()
}

func readyz(t *testing.T, metricsURL string) (int, string) {
	t.Helper()
	resp, err := http.Get(metricsURL + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func waitReadyz(t *testing.T, metricsURL string, want int, wantBody string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := readyz(t, metricsURL)
		if code == want && strings.Contains(body, wantBody) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %q, want %d %q", code, body, want, wantBody)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A replica is ready only once its approval-policy caches have synced: one
// that took traffic earlier would deny drift that a policy approves, while
// its peers allow it.
func TestReadyOnlyOncePolicyCachesSynced(t *testing.T) {
	up := newPolicyUpstream(t)
	metrics, _ := startServer(t, up.srv)

	// The upstream is healthy, the policy lists are held: not ready.
	waitReadyz(t, metrics, http.StatusServiceUnavailable, "caches")
	time.Sleep(300 * time.Millisecond) // several upstream probes later
	if code, body := readyz(t, metrics); code != http.StatusServiceUnavailable || !strings.Contains(body, "approval-policy") {
		t.Fatalf("/readyz before the policy caches synced: %d %q", code, body)
	}
	// One kind listed: still not ready.
	up.answer("approvalpolicies", "list")
	time.Sleep(300 * time.Millisecond)
	if code, body := readyz(t, metrics); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with one policy cache synced: %d %q", code, body)
	}
	up.answer("clusterapprovalpolicies", "list")
	waitReadyz(t, metrics, http.StatusOK, "ok")
}

// Without the policy CRDs there are no policies to wait for: the proxy
// becomes ready all the same.
func TestReadyWithoutPolicyCRDs(t *testing.T) {
	up := newPolicyUpstream(t)
	metrics, _ := startServer(t, up.srv)
	waitReadyz(t, metrics, http.StatusServiceUnavailable, "caches")
	up.answer("approvalpolicies", "404")
	up.answer("clusterapprovalpolicies", "404")
	waitReadyz(t, metrics, http.StatusOK, "ok")
}

// Without its namespace the proxy cannot keep a drift record or the
// reservation of a once approval: it is not ready, and says which
// namespace and which flag, until the namespace exists.
func TestNotReadyWithoutItsNamespace(t *testing.T) {
	up := newPolicyUpstream(t)
	up.answer("approvalpolicies", "list")
	up.answer("clusterapprovalpolicies", "list")
	up.namespaceMissing.Store(true)
	metrics, _ := startServer(t, up.srv)
	waitReadyz(t, metrics, http.StatusServiceUnavailable, `namespace "kausality-system" does not exist`)
	if _, body := readyz(t, metrics); !strings.Contains(body, "--drift-namespace") {
		t.Fatalf("/readyz does not name the flag: %q", body)
	}
	up.namespaceMissing.Store(false)
	waitReadyz(t, metrics, http.StatusOK, "ok")
	up.namespaceMissing.Store(true)
	waitReadyz(t, metrics, http.StatusServiceUnavailable, "namespace")
}

// The serving port bounds request headers (kube-apiserver's 1 MiB): a
// larger header block is answered 431 and never reaches a handler.
func TestServingRefusesOversizedHeaders(t *testing.T) {
	up := newPolicyUpstream(t)
	_, addr := startServer(t, up.srv)
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) // a test of the server's limits, not of its identity
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	big := strings.Repeat("x", 1<<20+8192)
	if _, err := fmt.Fprintf(conn, "GET /api HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", big); err != nil {
		// The server may close the connection before it has read all.
		t.Logf("writing the oversized header: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to an oversized header: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized header: %d, want 431", resp.StatusCode)
	}
}
