//go:build !kind

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// escalationRequest is the request an attacker would smuggle: a binding of
// itself to cluster-admin, named marker. Run as the proxy it would succeed.
func escalationRequest(marker, user, host string, extra string) string {
	body := fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":%q},`+
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},`+
		`"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":%q}]}`, marker, user)
	return "POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings HTTP/1.1\r\nHost: " + host + "\r\n" + extra +
		"Content-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
}

// expectNoBinding fails when a ClusterRoleBinding named marker exists.
func expectNoBinding(t *testing.T, marker string) {
	t.Helper()
	_, err := directClient(t).RbacV1().ClusterRoleBindings().Get(context.Background(), marker, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the smuggled ClusterRoleBinding %s exists (or cannot be read): %v", marker, err)
	}
}

func codes(rs []framework.RawResponse) []int {
	out := make([]int, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Code)
	}
	return out
}

// TestAttackFailedUpgradeConnectionReuse: kube-apiserver refuses an exec
// upgrade, and the attacker keeps writing on the same connection, either
// right behind the upgrade request or after the refusal. Were the proxy to
// keep its upstream connection (authenticated as the proxy) spliced to
// the caller's, those bytes would run as the proxy. The connection must
// end with the refusal, and the smuggled request must never run.
func TestAttackFailedUpgradeConnectionReuse(t *testing.T) {
	ctx := context.Background()
	// May exec into one pod that never runs (no node): kube-apiserver
	// refuses the upgrade with 400; any other pod with 403.
	f := newAttackFixture(t, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}, ResourceNames: []string{"pending"}})
	for _, name := range []string{"pending", "other"} {
		_, err := directClient(t).CoreV1().Pods(f.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}, metav1.CreateOptions{})
		mustf(t, err, "pod %s", name)
	}
	start := time.Now().Add(-time.Second)
	marker := "atk-upgrade-" + utilrand.String(5)
	host := proxyAddr(t)
	cases := []struct {
		name, pod string
		pipelined bool
		want      int
	}{
		{"exec refused by RBAC, request pipelined behind it", "other", true, http.StatusForbidden},
		{"exec refused by RBAC, request after the refusal", "other", false, http.StatusForbidden},
		{"exec of a pod without a node, request pipelined behind it", "pending", true, http.StatusBadRequest},
		{"exec of a pod without a node, request after the refusal", "pending", false, http.StatusBadRequest},
	}
	n := 0
	for _, who := range []attacker{f.cert, f.token} {
		for _, tc := range cases {
			n++
			name := fmt.Sprintf("%s-%d", marker, n)
			t.Run(who.kind()+"/"+tc.name, func(t *testing.T) {
				auth := who.rawAuthHeader()
				upgrade := "POST /api/v1/namespaces/" + f.ns + "/pods/" + tc.pod + "/exec?command=sh&stdin=true&stdout=true HTTP/1.1\r\nHost: " + host + "\r\n" + auth +
					"Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
				smuggled := escalationRequest(name, who.user, host, "")
				cfg, err := framework.TLSConfig(cluster.ProxyEndpoint().CAData, who.cert, "http/1.1")
				mustf(t, err, "TLS config")
				conn, err := tls.Dial("tcp", host, cfg)
				mustf(t, err, "dial")
				defer conn.Close()
				first := upgrade
				if tc.pipelined {
					first += smuggled
				}
				_, err = conn.Write([]byte(first))
				mustf(t, err, "write")
				var got []framework.RawResponse
				closed := false
				if tc.pipelined {
					got, closed, err = framework.ReadResponses(conn, 5*time.Second)
				} else {
					got, closed, err = framework.ReadResponses(conn, 2*time.Second)
					if err == nil && !closed {
						// The answer is in; write the next request on the
						// same connection, then see what comes back.
						if _, werr := conn.Write([]byte(smuggled)); werr == nil {
							var more []framework.RawResponse
							more, closed, err = framework.ReadResponses(conn, 5*time.Second)
							got = append(got, more...)
						} else {
							closed = true
						}
					}
				}
				mustf(t, err, "reading answers")
				if len(got) == 0 && closed && tc.pipelined {
					// The refused upgrade's connection is closed with the
					// pipelined request unread, so the kernel resets it,
					// and the reset can overtake the answer on its way:
					// the connection ended, and the request behind it was
					// never served (below).
					t.Logf("the connection was reset before kube-apiserver's %d arrived", tc.want)
					expectNoBinding(t, name)
					return
				}
				if len(got) == 0 || got[0].Code != tc.want {
					t.Fatalf("answers %v, want kube-apiserver's %d first", codes(got), tc.want)
				}
				if len(got) != 1 || !closed {
					t.Fatalf("answers %v (connection closed: %v): the connection must end with the refused upgrade", codes(got), closed)
				}
				expectNoBinding(t, name)
			})
		}
	}
	expectOnlyCaller(t, start, marker, f.cert.user, f.token.user)
}

// TestAttackRequestSmuggling: HTTP/1.1 framing the proxy and a server
// behind it could read differently: a Content-Length next to
// Transfer-Encoding: chunked, conflicting lengths, unknown transfer
// codings. The proxy reads each as Go's server does and forwards over
// its own framing, so whatever follows the first request is, at most, a
// request of the attacker's own on this connection: authenticated by
// itself, never smuggled upstream.
func TestAttackRequestSmuggling(t *testing.T) {
	f := newAttackFixture(t)
	start := time.Now().Add(-time.Second)
	marker := "atk-smuggle-" + utilrand.String(5)
	host := proxyAddr(t)
	cmPath := "/api/v1/namespaces/" + f.ns + "/configmaps"
	cases := []struct {
		name string
		// request builds the bytes sent; smuggled is the escalation.
		request func(auth, smuggled string) string
		// want: the answers, in order, for a certificate and a token
		// caller (a smuggled request carries no token of its own).
		wantCert, wantToken []int
	}{
		{"chunked with a Content-Length covering a smuggled request", func(auth, smuggled string) string {
			return "POST " + cmPath + " HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "Content-Type: application/json\r\n" +
				"Content-Length: " + fmt.Sprint(5+len(smuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled
		}, []int{400, 403}, []int{400, 401}},
		{"Transfer-Encoding before a Content-Length of zero", func(auth, smuggled string) string {
			chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)
			return "POST " + cmPath + " HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n" +
				"Content-Length: 0\r\n\r\n" + chunk
		}, []int{400}, []int{400}},
		{"two different Content-Lengths", func(auth, smuggled string) string {
			return "POST " + cmPath + " HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "Content-Type: application/json\r\n" +
				"Content-Length: 2\r\nContent-Length: " + fmt.Sprint(2+len(smuggled)) + "\r\n\r\n{}" + smuggled
		}, []int{400}, []int{400}},
		{"Transfer-Encoding: chunked twice", func(auth, smuggled string) string {
			return "POST " + cmPath + " HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "Content-Type: application/json\r\n" +
				"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled
		}, []int{501}, []int{501}},
		{"Transfer-Encoding: identity with a Content-Length", func(auth, smuggled string) string {
			return "POST " + cmPath + " HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "Content-Type: application/json\r\n" +
				"Transfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}" + smuggled
		}, []int{501}, []int{501}},
		{"a space before the colon of Transfer-Encoding", func(auth, smuggled string) string {
			return "POST " + cmPath + " HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "Content-Type: application/json\r\n" +
				"Transfer-Encoding : chunked\r\nContent-Length: 2\r\n\r\n{}" + smuggled
		}, []int{400}, []int{400}},
		{"a chunk size that overflows", func(auth, smuggled string) string {
			return "POST " + cmPath + " HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "Content-Type: application/json\r\n" +
				"Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\n" + smuggled + "\r\n0\r\n\r\n"
		}, []int{400}, []int{400}},
	}
	n := 0
	for _, who := range []attacker{f.cert, f.token} {
		for _, tc := range cases {
			n++
			name := fmt.Sprintf("%s-%d", marker, n)
			t.Run(who.kind()+"/"+tc.name, func(t *testing.T) {
				auth, want := who.rawAuthHeader(), tc.wantCert
				if who.token != "" {
					want = tc.wantToken
				}
				cfg, err := framework.TLSConfig(cluster.ProxyEndpoint().CAData, who.cert)
				mustf(t, err, "TLS config")
				got, _, err := framework.RawHTTP1(host, cfg, []byte(tc.request(auth, escalationRequest(name, who.user, host, ""))), 5*time.Second)
				mustf(t, err, "raw request")
				if fmt.Sprint(codes(got)) != fmt.Sprint(want) {
					t.Fatalf("answers %v, want %v", codes(got), want)
				}
				expectNoBinding(t, name)
			})
		}
	}
	expectOnlyCaller(t, start, marker, f.cert.user, f.token.user)
}

// TestAttackHTTP2RapidReset: many streams opened and reset at once on one
// HTTP/2 connection. Whatever of them reaches kube-apiserver does so as the
// attacker, nothing more is forwarded than was asked for, and the proxy
// keeps serving.
func TestAttackHTTP2RapidReset(t *testing.T) {
	f := newAttackFixture(t)
	start := time.Now().Add(-time.Second)
	marker := "atk-reset-" + utilrand.String(5)
	env.Recorder.Watch(marker)
	const streams = 300
	cfg, err := framework.TLSConfig(cluster.ProxyEndpoint().CAData, f.cert.cert, "h2")
	mustf(t, err, "TLS config")
	conn, err := tls.Dial("tcp", proxyAddr(t), cfg)
	mustf(t, err, "dial")
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	_, err = conn.Write([]byte(http2.ClientPreface))
	mustf(t, err, "preface")
	fr := http2.NewFramer(conn, conn)
	mustf(t, fr.WriteSettings(), "settings")
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	headers := func(path string) []byte {
		hbuf.Reset()
		for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", proxyAddr(t)}, {":path", path}} {
			mustf(t, enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]}), "hpack")
		}
		return bytes.Clone(hbuf.Bytes())
	}
	// Read (and drop) whatever the server sends while we write.
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := fr.ReadFrame(); err != nil {
				done <- err
				return
			}
		}
	}()
	sent := 0
	for i := 0; i < streams; i++ {
		id := uint32(2*i + 1)
		path := fmt.Sprintf("/api/v1/namespaces/%s-%d/secrets", marker, i)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: headers(path), EndStream: true, EndHeaders: true}); err != nil {
			break // the server may end the connection: that is allowed
		}
		if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
		sent++
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	_ = conn.Close()

	// The proxy still serves, and as the caller.
	code, body := sendRaw(t, f.cert.proxyClient(t), cluster.ProxyEndpoint().URL, http.MethodGet, "/api/v1/namespaces/"+marker+"-after/secrets", "", nil, nil)
	expectAttackOutcome(t, code, body, seenAsCaller, f.cert.user)
	forwarded := env.Recorder.Requests(marker)
	if len(forwarded) > sent+1 {
		t.Fatalf("%d requests went upstream for %d streams and one request", len(forwarded), sent)
	}
	for _, r := range forwarded {
		if got := r.Header.Values("Impersonate-User"); len(got) != 1 || got[0] != f.cert.user {
			t.Fatalf("a request went upstream impersonating %v, want exactly %s: %s", got, f.cert.user, r.Path)
		}
		if strings.HasPrefix(r.Path, "/api/v1/namespaces/"+marker) && !strings.HasSuffix(r.Path, "/secrets") {
			t.Fatalf("a request nobody sent went upstream: %s", r.Path)
		}
	}
	t.Logf("%d streams opened and reset, %d reached kube-apiserver", sent, len(forwarded)-1)
	expectOnlyCaller(t, start, marker, f.cert.user)
}

// TestAttackDeniedWriteSendsNothingUpstream: a write the attacker may not
// make is refused by the proxy, and not one byte of it reaches
// kube-apiserver: the upstream transport saw no request for the object.
func TestAttackDeniedWriteSendsNothingUpstream(t *testing.T) {
	f := newAttackFixture(t)
	marker := "atk-denied-" + utilrand.String(5)
	_, err := directClient(t).CoreV1().Secrets(f.ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: marker}}, metav1.CreateOptions{})
	mustf(t, err, "the Secret")
	env.Recorder.Watch(marker)
	obj := "/api/v1/namespaces/" + f.ns + "/secrets/" + marker
	cases := []struct{ name, method, path, contentType, body string }{
		{"create", http.MethodPost, "/api/v1/namespaces/" + f.ns + "/secrets?fieldManager=" + marker, "application/json", `{"metadata":{"name":"` + marker + `-new"}}`},
		{"update", http.MethodPut, obj, "application/json", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"` + marker + `"},"stringData":{"k":"v"}}`},
		{"merge patch", http.MethodPatch, obj, "application/merge-patch+json", `{"stringData":{"k":"v"}}`},
		{"json patch", http.MethodPatch, obj, "application/json-patch+json", `[{"op":"add","path":"/data","value":{"k":"dg=="}}]`},
		{"apply", http.MethodPatch, obj + "?fieldManager=x&force=true", "application/apply-patch+yaml", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"` + marker + `"}}`},
		{"delete", http.MethodDelete, obj, "", ""},
		{"delete with a body", http.MethodDelete, obj, "application/json", `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`},
	}
	for _, who := range []attacker{f.cert, f.token} {
		for _, tc := range cases {
			t.Run(who.kind()+"/"+tc.name, func(t *testing.T) {
				before := len(env.Recorder.Requests(marker))
				code, body := sendRaw(t, who.proxyClient(t), cluster.ProxyEndpoint().URL, tc.method, tc.path, tc.contentType, []byte(tc.body), who.header())
				if code != http.StatusForbidden {
					t.Fatalf("code %d, want 403: %s", code, body)
				}
				if !strings.Contains(decodeStatus(t, body).Message, forbiddenFor(who.user)) {
					t.Fatalf("the denial does not name %s: %s", who.user, body)
				}
				for _, r := range env.Recorder.Requests(marker)[before:] {
					t.Errorf("went upstream: %s %s?%s (%d bytes)", r.Method, r.Path, r.RawQuery, len(r.Body))
				}
			})
		}
	}
}
