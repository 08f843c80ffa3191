//go:build !kind

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// slowBody is the body a slow client announces and then sends a byte at a
// time: at one byte a second it would take minutes to arrive.
const slowBody = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"},"data":{"padding":"` +
	`xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`

// answerWait bounds how long a test waits for an answer that must come at
// once (or, for a body cut off by its deadline, within a few seconds): far
// below what the slow body would take to arrive, far above any scheduling
// delay on a loaded machine.
const answerWait = 40 * time.Second

// slowConn opens a TLS connection to the proxy (HTTP/1.1), presenting cert
// when not nil, and sends a POST of body to path whose header and first
// byte go out at once; the rest is the caller's to trickle, or not.
func slowConn(t *testing.T, cert *tls.Certificate, path, extraHeader, body string) (net.Conn, string) {
	t.Helper()
	cfg, err := framework.TLSConfig(env.ProxyCAData, cert, "http/1.1")
	mustf(t, err, "TLS config")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", proxyAddr(t), cfg)
	mustf(t, err, "dial the proxy")
	t.Cleanup(func() { _ = conn.Close() })
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, proxyAddr(t), extraHeader, len(body), body[:1])
	_, err = io.WriteString(conn, head)
	mustf(t, err, "send the request header")
	return conn, body[1:]
}

// trickleBody sends rest a byte every gap until it is sent or the
// connection fails (the proxy closed it).
func trickleBody(conn net.Conn, rest string, gap time.Duration) {
	for i := range len(rest) {
		time.Sleep(gap)
		if _, err := conn.Write([]byte{rest[i]}); err != nil {
			return
		}
	}
}

// readAnswer reads one answer off conn within answerWait, and whether the
// proxy then closed the connection.
func readAnswer(t *testing.T, conn net.Conn) (*http.Response, metav1.Status, bool) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(answerWait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %s while the body is still coming: %v", answerWait, err)
	}
	data, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var status metav1.Status
	// kube-apiserver's own timeout answers carry no kind.
	if err := json.Unmarshal(data, &status); err != nil || status.Status != metav1.StatusFailure {
		t.Errorf("the answer %d is not a Status: %q", resp.StatusCode, data)
	}
	_ = conn.SetReadDeadline(time.Now().Add(answerWait))
	_, err = br.ReadByte()
	var ne net.Error
	closed := err != nil && (!errors.As(err, &ne) || !ne.Timeout())
	return resp, status, closed
}

// TestAttackSlowBodyWithoutCredentials: a client without credentials
// announces a write body and sends it a byte at a time. kube-apiserver
// answers 401 at once and closes the connection; the proxy must too,
// rather than read the body first, and nothing goes upstream.
func TestAttackSlowBodyWithoutCredentials(t *testing.T) {
	marker := "atk-slowbody-" + utilrand.String(5)
	env.Recorder.Watch(marker)
	path := "/api/v1/namespaces/" + marker + "/configmaps"
	body := fmt.Sprintf(slowBody, marker)

	t.Run("HTTP/1.1", func(t *testing.T) {
		conn, rest := slowConn(t, nil, path, "", body)
		go trickleBody(conn, rest, time.Second)
		resp, status, closed := readAnswer(t, conn)
		if resp.StatusCode != http.StatusUnauthorized || status.Reason != metav1.StatusReasonUnauthorized {
			t.Errorf("got %d %s, want 401 Unauthorized", resp.StatusCode, status.Reason)
		}
		if !resp.Close {
			t.Errorf("the answer does not say Connection: close: %v", resp.Header)
		}
		if !closed {
			t.Error("the proxy kept the connection open for the rest of the body")
		}
	})
	t.Run("HTTP/2", func(t *testing.T) {
		if code, data := slowHTTP2Post(t, nil, path, body); code != http.StatusUnauthorized {
			t.Errorf("got %d %s, want 401", code, data)
		}
	})
	if got := env.Recorder.Requests(marker); len(got) != 0 {
		t.Errorf("%d requests reached kube-apiserver: %+v", len(got), got)
	}
}

// pipeConn lets trickleBody write to a pipe.
type pipeConn struct{ *io.PipeWriter }

func (pipeConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (pipeConn) LocalAddr() net.Addr              { return nil }
func (pipeConn) RemoteAddr() net.Addr             { return nil }
func (pipeConn) SetDeadline(time.Time) error      { return nil }
func (pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (pipeConn) SetWriteDeadline(time.Time) error { return nil }

// TestAttackSlowBodiesHoldGoroutines: many clients without credentials
// each announce a body and never send it. Each must be answered and its
// connection closed, so that none of them keeps a goroutine of the proxy
// (which runs in this process).
func TestAttackSlowBodiesHoldGoroutines(t *testing.T) {
	const conns = 150
	marker := "atk-slowconns-" + utilrand.String(5)
	path := "/api/v1/namespaces/" + marker + "/configmaps"
	body := fmt.Sprintf(slowBody, marker)
	base := servingHTTP1()
	var open []net.Conn
	for range conns {
		conn, _ := slowConn(t, nil, path, "", body)
		open = append(open, conn)
	}
	// The clients keep their connections open and send nothing more: only
	// the proxy can end them.
	eventually(t, 2*answerWait, fmt.Sprintf("the goroutines of %d slow connections are gone", conns), func() error {
		if n := servingHTTP1(); n > base+conns/10 {
			return fmt.Errorf("%d goroutines serve HTTP/1.1 connections, %d before the attack (%d goroutines in all)", n, base, runtime.NumGoroutine())
		}
		return nil
	})
	for i, conn := range open {
		resp, _, closed := readAnswer(t, conn)
		if resp.StatusCode != http.StatusUnauthorized || !closed {
			t.Fatalf("connection %d: got %d, closed %v; want 401 and closed", i, resp.StatusCode, closed)
		}
	}
}

// servingHTTP1 counts the goroutines of this process that serve an
// HTTP/1.1 connection. The whole count moves with the controller manager's
// watches through the proxy (HTTP/2), which this one leaves out.
func servingHTTP1() int {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "net/http.(*conn).serve(") && !strings.Contains(g, "http2") {
			n++
		}
	}
	return n
}

// TestAttackSlowBodyAuthenticatedWrite: a caller with credentials sends a
// write whose body trickles in, one the proxy decides (a ConfigMap) and one
// it forwards as it comes (a TokenRequest). The body must arrive within the
// request's bound (here its ?timeout=): after it, the caller gets a 504
// Status and, over HTTP/1.1, the connection ends; the write never happens.
func TestAttackSlowBodyAuthenticatedWrite(t *testing.T) {
	f := newAttackFixture(t, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}})
	name := "atk-slowwrite-" + utilrand.String(5)
	decided := "/api/v1/namespaces/" + f.ns + "/configmaps?timeout=2s"
	forwarded := "/api/v1/namespaces/" + f.ns + "/serviceaccounts/mallory/token?timeout=2s"
	body := fmt.Sprintf(slowBody, name)
	tokenBody := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["` + strings.Repeat("a", 100) + `"]}}`

	for _, tc := range []struct {
		name, path, body string
		h2               bool
		token            bool
	}{
		{"decided, HTTP/1.1, certificate", decided, body, false, false},
		{"decided, HTTP/1.1, token", decided, body, false, true},
		{"decided, HTTP/2, certificate", decided, body, true, false},
		{"forwarded, HTTP/1.1, certificate", forwarded, tokenBody, false, false},
		{"forwarded, HTTP/2, certificate", forwarded, tokenBody, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cert *tls.Certificate
			authHeader := ""
			if tc.token {
				authHeader = f.token.rawAuthHeader()
			} else {
				cert = f.cert.cert
			}
			if tc.h2 {
				code, data := slowHTTP2Post(t, cert, tc.path, tc.body)
				var status metav1.Status
				if code != http.StatusGatewayTimeout || json.Unmarshal(data, &status) != nil || status.Reason != metav1.StatusReasonTimeout {
					t.Errorf("got %d %s, want a 504 Timeout Status", code, data)
				}
				return
			}
			conn, rest := slowConn(t, cert, tc.path, authHeader, tc.body)
			go trickleBody(conn, rest, time.Second)
			resp, status, closed := readAnswer(t, conn)
			if resp.StatusCode != http.StatusGatewayTimeout || status.Reason != metav1.StatusReasonTimeout {
				t.Errorf("got %d %s %q, want 504 Timeout", resp.StatusCode, status.Reason, status.Message)
			}
			if !closed {
				t.Error("the proxy kept the connection open for the rest of the body")
			}
		})
	}
	_, err := directClient(t).CoreV1().ConfigMaps(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the write whose body was cut off was applied (or cannot be read): %v", err)
	}
}

// slowHTTP2Post POSTs body to path over HTTP/2, presenting cert when not
// nil, sending the body a byte a second, and returns the answer, which
// must come within answerWait.
func slowHTTP2Post(t *testing.T, cert *tls.Certificate, path, body string) (int, []byte) {
	t.Helper()
	cfg, err := framework.TLSConfig(env.ProxyCAData, cert, "h2")
	mustf(t, err, "TLS config")
	var h2 http.Protocols
	h2.SetHTTP2(true)
	tr := &http.Transport{TLSClientConfig: cfg, Protocols: &h2}
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	// Closing the pipe ends the trickle once the answer is in.
	defer pw.Close()
	go func() {
		_, _ = io.WriteString(pw, body[:1])
		trickleBody(pipeConn{pw}, body[1:], time.Second)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), answerWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+proxyAddr(t)+path, pr)
	mustf(t, err, "request")
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := tr.RoundTrip(req)
	mustf(t, err, "no answer while the body is still coming")
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// TestWatchOutlivesTheRequestBound: the bound on request bodies and
// durations leaves long-running requests alone: a watch that names a
// ?timeout= far shorter than it runs (which would bound any other request)
// still delivers an event created after it.
func TestWatchOutlivesTheRequestBound(t *testing.T) {
	f := newAttackFixture(t)
	resp, err := f.cert.proxyClient(t).Get(env.ProxyEndpoint().URL + "/api/v1/namespaces/" + f.ns + "/configmaps?watch=1&timeout=1s&timeoutSeconds=25")
	mustf(t, err, "watch")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", resp.StatusCode)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	time.Sleep(5 * time.Second)
	name := "late-" + utilrand.String(5)
	_, err = directClient(t).CoreV1().ConfigMaps(f.ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	mustf(t, err, "create")
	for line := range lines {
		if strings.Contains(line, `"ADDED"`) && strings.Contains(line, name) {
			return
		}
	}
	t.Fatal("the watch ended before it saw an event created after the bound")
}

// TestAttackUnauthenticatedPathsAddMetricLabels: a client without
// credentials (or with some, asking for resources that do not exist)
// sends requests to made-up paths and methods. The proxy's metrics must
// not grow a label value for any of them.
func TestAttackUnauthenticatedPathsAddMetricLabels(t *testing.T) {
	f := newAttackFixture(t)
	marker := "atkmetric" + utilrand.String(6)
	anon := rawClient(t, nil)
	mallory := f.cert.proxyClient(t)
	base := env.ProxyEndpoint().URL
	for i := range 10 {
		for _, c := range []*http.Client{anon, mallory} {
			for _, p := range []string{
				fmt.Sprintf("/api/v1/%s%d", marker, i),
				fmt.Sprintf("/apis/%s.example/v1/namespaces/%s/%s%d", marker, f.ns, marker, i),
				fmt.Sprintf("/api/v1/namespaces/%s/configmaps/x/%s%d", f.ns, marker, i),
			} {
				code, _ := sendRaw(t, c, base, http.MethodGet, p, "", nil, nil)
				if code < 400 {
					t.Fatalf("GET %s: %d", p, code)
				}
			}
			code, _ := sendRaw(t, c, base, strings.ToUpper(marker)+fmt.Sprint(i), "/api/v1/namespaces", "", nil, nil)
			if code < 400 {
				t.Fatalf("made-up method: %d", code)
			}
		}
	}
	resp, err := http.Get(env.MetricsURL + "/metrics")
	mustf(t, err, "scrape the metrics")
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	mustf(t, err, "read the metrics")
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, marker) {
			t.Errorf("a made-up path or method became a label value: %s", line)
		}
	}
}
