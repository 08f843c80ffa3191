package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// trickle sends a request header announcing len(body) bytes, then the body
// a byte every gap, and returns the answer with when it came.
func trickle(t *testing.T, url, method, path, body string, gap time.Duration) (*http.Response, []byte, time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	start := time.Now()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", method, path, len(body))
	go func() {
		for i := range len(body) {
			time.Sleep(gap)
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	data, _ := io.ReadAll(resp.Body)
	return resp, data, time.Since(start)
}

func TestRequestDeadlineBoundsTheBody(t *testing.T) {
	const bound = 500 * time.Millisecond
	// Like the reverse proxy, the inner handler answers nobody when reading
	// the body fails.
	readAll := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	tests := []struct {
		name, method, path string
		body               string
		gap                time.Duration
		want               int
	}{
		{"a write whose body trickles in is cut off", http.MethodPost, "/api/v1/namespaces/default/configmaps", strings.Repeat("x", 40), 100 * time.Millisecond, http.StatusGatewayTimeout},
		{"a shorter ?timeout= cuts off sooner", http.MethodPost, "/api/v1/namespaces/default/configmaps?timeout=100ms", strings.Repeat("x", 40), 50 * time.Millisecond, http.StatusGatewayTimeout},
		{"a write whose body arrives in time", http.MethodPost, "/api/v1/namespaces/default/configmaps", "{}", 10 * time.Millisecond, http.StatusCreated},
		{"a long-running request is exempt", http.MethodPost, "/api/v1/namespaces/default/pods/p/exec", strings.Repeat("x", 12), 100 * time.Millisecond, http.StatusCreated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := withRequestDeadline(readAll, newLongRunningCheck(), bound, context.Background(), clock.RealClock{})
			h = genericapifilters.WithRequestInfo(h, newRequestInfoFactory())
			srv := httptest.NewServer(withEarlyAnswerClose(h))
			t.Cleanup(srv.Close)
			resp, data, took := trickle(t, srv.URL, tt.method, tt.path, tt.body, tt.gap)
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d %s after %s, want %d", resp.StatusCode, data, took, tt.want)
			}
			if tt.want != http.StatusGatewayTimeout {
				return
			}
			var status metav1.Status
			if err := json.Unmarshal(data, &status); err != nil || status.Reason != metav1.StatusReasonTimeout {
				t.Errorf("answer is not a Timeout Status: %s (%v)", data, err)
			}
			if !resp.Close {
				t.Errorf("the connection is kept for a body still coming: %v", resp.Header)
			}
		})
	}
}

// A forwarded body cut off by its deadline comes back from the transport
// as an error; the caller must learn that its body was late, not that
// kube-apiserver failed.
func TestUpstreamErrorOfALateBody(t *testing.T) {
	up := &upstream{url: &url.URL{Scheme: "https", Host: "kube-apiserver:6443"}}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/sa/token", nil)
	late := fmt.Errorf("http2: request body: %w", fmt.Errorf("%w: %w", errBodyDeadline, os.ErrDeadlineExceeded))
	if got := up.classify(r, late).ErrStatus; got.Code != http.StatusGatewayTimeout || got.Reason != metav1.StatusReasonTimeout {
		t.Errorf("a late body is answered %d %s, want 504 Timeout", got.Code, got.Reason)
	}
	if got := up.classify(r, errors.New("connection reset by peer")).ErrStatus; got.Code == http.StatusGatewayTimeout {
		t.Errorf("an upstream failure is answered as a late body: %d", got.Code)
	}
}

// The deadline on the context a request is served with: the injected
// clock's now plus the bound, or the client's shorter ?timeout= with room
// for kube-apiserver to answer it first; none for long-running requests,
// which end when draining does instead.
func TestRequestDeadlineOnTheContext(t *testing.T) {
	const limit = time.Minute
	tests := []struct {
		name          string
		method, path  string
		noRequestInfo bool

		wantDeadline time.Duration // 0: none
		wantDrained  bool          // ended when the server starts draining
	}{
		{name: "a write gets the bound", method: http.MethodPost, path: "/api/v1/namespaces/default/configmaps", wantDeadline: limit},
		{name: "a read gets the bound", method: http.MethodGet, path: "/api/v1/namespaces/default/configmaps/c", wantDeadline: limit},
		{name: "a shorter ?timeout= wins, with a second for the upstream's own answer", method: http.MethodGet, path: "/api/v1/namespaces/default/configmaps?timeout=10s", wantDeadline: 11 * time.Second},
		{name: "a longer ?timeout= does not", method: http.MethodGet, path: "/api/v1/namespaces/default/configmaps?timeout=1h", wantDeadline: limit},
		{name: "an unparsable ?timeout= is ignored", method: http.MethodGet, path: "/api/v1/namespaces/default/configmaps?timeout=soon", wantDeadline: limit},
		{name: "a negative ?timeout= is ignored", method: http.MethodGet, path: "/api/v1/namespaces/default/configmaps?timeout=-5s", wantDeadline: limit},
		{name: "a watch has no deadline and ends with draining", method: http.MethodGet, path: "/api/v1/namespaces/default/configmaps?watch=true", wantDrained: true},
		{name: "an exec has no deadline and ends with draining", method: http.MethodPost, path: "/api/v1/namespaces/default/pods/p/exec", wantDrained: true},
		{name: "a request without request info is treated as long-running", method: http.MethodGet, path: "/api/v1/pods", noRequestInfo: true, wantDrained: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// An hour ahead of the wall clock, so that a deadline read from
			// the wall clock by mistake cannot match.
			clk := testingclock.NewFakeClock(time.Now().Add(time.Hour).Truncate(time.Second))
			draining, drain := context.WithCancel(context.Background())
			defer drain()
			var deadline time.Time
			var hasDeadline, drained bool
			next := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				deadline, hasDeadline = r.Context().Deadline()
				drain()
				select {
				case <-r.Context().Done():
					drained = true
				case <-time.After(200 * time.Millisecond):
				}
			})
			h := withRequestDeadline(next, newLongRunningCheck(), limit, draining, clk)
			if !tt.noRequestInfo {
				h = genericapifilters.WithRequestInfo(h, newRequestInfoFactory())
			}
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tt.method, tt.path, strings.NewReader("{}")))

			if want := tt.wantDeadline != 0; hasDeadline != want {
				t.Fatalf("deadline %v, want one: %v", deadline, want)
			}
			if hasDeadline && !deadline.Equal(clk.Now().Add(tt.wantDeadline)) {
				t.Errorf("deadline %s after now, want %s", deadline.Sub(clk.Now()), tt.wantDeadline)
			}
			if drained != tt.wantDrained {
				t.Errorf("ended by draining: %v, want %v", drained, tt.wantDrained)
			}
		})
	}
}

func TestTimeoutParameter(t *testing.T) {
	tests := []struct{ query, want string }{
		{"", ""},
		{"fieldManager=kube-controller-manager", ""},
		{"timeout=5s", "5s"},
		{"fieldManager=x&timeout=250ms", "250ms"},
		{"%74imeout=3s", "3s"}, // the name escaped
		{"timeout=1%30s", "10s"},
		{"timeoutSeconds=30", ""},
		{"dryRun=All&fieldManager=a%2Fb", ""},
	}
	for _, tt := range tests {
		if got := timeoutParameter(tt.query); got != tt.want {
			t.Errorf("timeoutParameter(%q) = %q, want %q", tt.query, got, tt.want)
		}
		want, _ := url.ParseQuery(tt.query)
		if got := timeoutParameter(tt.query); got != want.Get("timeout") {
			t.Errorf("timeoutParameter(%q) = %q, but the parsed query says %q", tt.query, got, want.Get("timeout"))
		}
	}
}

// On HTTP/2 too, a body that trickles in is cut off at the deadline, and
// the caller gets a 504 Status; a body that arrives in time is served.
func TestRequestDeadlineBoundsTheBodyOnHTTP2(t *testing.T) {
	const bound = 500 * time.Millisecond
	readAll := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	h := withRequestDeadline(readAll, newLongRunningCheck(), bound, context.Background(), clock.RealClock{})
	h = genericapifilters.WithRequestInfo(h, newRequestInfoFactory())
	srv := httptest.NewUnstartedServer(withEarlyAnswerClose(h))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 30 * time.Second
	for _, tt := range []struct {
		name string
		gap  time.Duration
		want int
	}{
		{"a body that trickles in is cut off", 100 * time.Millisecond, http.StatusGatewayTimeout},
		{"a body that arrives in time is served", time.Millisecond, http.StatusCreated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body, sender := io.Pipe()
			go func() {
				defer sender.Close()
				for range 20 {
					time.Sleep(tt.gap)
					if _, err := sender.Write([]byte("x")); err != nil {
						return
					}
				}
			}()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/namespaces/default/configmaps", body)
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			if resp.ProtoMajor != 2 {
				t.Fatalf("served over HTTP/%d, want HTTP/2", resp.ProtoMajor)
			}
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d %s after %s, want %d", resp.StatusCode, data, time.Since(start), tt.want)
			}
			if tt.want != http.StatusGatewayTimeout {
				return
			}
			var status metav1.Status
			if err := json.Unmarshal(data, &status); err != nil || status.Reason != metav1.StatusReasonTimeout {
				t.Errorf("answer is not a Timeout Status: %s (%v)", data, err)
			}
		})
	}
}
