package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
)

// failingTransport fails the first len(errs) requests with errs, in
// order, and answers the rest with 200.
type failingTransport struct {
	errs  []error
	calls int
}

func (f *failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls++
	if f.calls <= len(f.errs) {
		return nil, f.errs[f.calls-1]
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

func TestResendOnLostConnection(t *testing.T) {
	lost := &url.Error{Op: "Get", URL: "https://kube-apiserver/api", Err: io.ErrUnexpectedEOF}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	brokenPipe := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	http2Lost := errors.New("http2: client connection lost")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name      string
		method    string
		body      io.Reader
		ctx       context.Context
		errs      []error
		wantCalls int
		wantErr   bool
	}{
		{name: "a read answered", method: http.MethodGet, wantCalls: 1},
		{name: "a read whose connection was cut: sent again", method: http.MethodGet, errs: []error{lost}, wantCalls: 2},
		{name: "a read whose connection was reset: sent again", method: http.MethodGet, errs: []error{reset}, wantCalls: 2},
		{name: "a read written on a connection the upstream had closed (broken pipe): sent again", method: http.MethodGet, errs: []error{brokenPipe}, wantCalls: 2},
		{name: "a read whose HTTP/2 connection was lost: sent again", method: http.MethodGet, errs: []error{http2Lost}, wantCalls: 2},
		{name: "a HEAD whose connection was cut: sent again", method: http.MethodHead, errs: []error{io.EOF}, wantCalls: 2},
		{name: "lost twice: sent again once only", method: http.MethodGet, errs: []error{lost, lost}, wantCalls: 2, wantErr: true},
		{name: "kube-apiserver cannot be reached: not sent again", method: http.MethodGet, errs: []error{refused}, wantCalls: 1, wantErr: true},
		{name: "a write whose connection was cut: not sent again", method: http.MethodPost, body: strings.NewReader("{}"), errs: []error{lost}, wantCalls: 1, wantErr: true},
		{name: "a patch without a body: not sent again", method: http.MethodPatch, errs: []error{lost}, wantCalls: 1, wantErr: true},
		{name: "a read with a body: not sent again", method: http.MethodGet, body: strings.NewReader("x"), errs: []error{lost}, wantCalls: 1, wantErr: true},
		{name: "the caller went away: not sent again", method: http.MethodGet, ctx: canceled, errs: []error{lost}, wantCalls: 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			r, err := http.NewRequestWithContext(ctx, tc.method, "https://kube-apiserver/api/v1/namespaces", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			next := &failingTransport{errs: tc.errs}
			resp, err := resendOnLostConnection{next: next}.RoundTrip(r)
			if next.calls != tc.wantCalls {
				t.Errorf("sent %d times, want %d", next.calls, tc.wantCalls)
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("error %v, want one: %v", err, tc.wantErr)
			}
			if err == nil && resp.StatusCode != http.StatusOK {
				t.Errorf("answer %d", resp.StatusCode)
			}
		})
	}
}

// A connection that closed under a request means kube-apiserver went away:
// 503, which clients retry, as when it cannot be dialled; any other failure
// of the upstream is a 502.
func TestUpstreamFailureStatus(t *testing.T) {
	up := &upstream{url: &url.URL{Scheme: "https", Host: "kube-apiserver:6443"}}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps", nil)
	for _, tc := range []struct {
		name string
		err  error
		want int32
	}{
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, http.StatusServiceUnavailable},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, http.StatusServiceUnavailable},
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, http.StatusServiceUnavailable},
		{"a malformed answer", errors.New("net/http: invalid header"), http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := up.classify(r, tc.err).ErrStatus.Code; got != tc.want {
				t.Errorf("answered %d, want %d", got, tc.want)
			}
		})
	}
}
