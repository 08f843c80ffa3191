package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// slowBodyExchange sends the header of a POST that announces a body of
// announced bytes and then only sent of them, and reads what the server
// does within wait: its answer, and whether it closed the connection.
func slowBodyExchange(t *testing.T, url string, announced int, sent string, wait time.Duration) (*http.Response, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", announced, sent)
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %s while the body is still coming: %v", wait, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	_, err = br.ReadByte()
	var ne net.Error
	closed := errors.Is(err, io.EOF) || (err != nil && (!errors.As(err, &ne) || !ne.Timeout()))
	return resp, closed
}

func TestEarlyAnswerClose(t *testing.T) {
	unauthorized := func(w http.ResponseWriter, _ *http.Request) {
		WriteStatus(w, apierrors.NewUnauthorized("Unauthorized"))
	}
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		announced int
		sent      string
		wantClose bool
	}{
		{"answered before any of the body", unauthorized, 100, "{", true},
		{"answered after part of the body", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadFull(r.Body, make([]byte, 1))
			unauthorized(w, r)
		}, 100, "{\"", true},
		{"nothing written before the body ended", func(http.ResponseWriter, *http.Request) {}, 100, "{", true},
		{"answered after the whole body", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
		}, 2, "{}", false},
		{"answered without reading a body that had fully arrived", unauthorized, 2, "{}", true},
		{"answered while another goroutine still reads the body", func(w http.ResponseWriter, r *http.Request) {
			// As the reverse proxy's transport does when kube-apiserver
			// answers before the body is through.
			go func() { _, _ = io.Copy(io.Discard, r.Body) }()
			time.Sleep(50 * time.Millisecond)
			unauthorized(w, r)
		}, 100, "{", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(withEarlyAnswerClose(tt.handler))
			t.Cleanup(srv.Close)
			// Without the filter the server would wait here for the rest
			// of the body, which never comes.
			resp, closed := slowBodyExchange(t, srv.URL, tt.announced, tt.sent, 10*time.Second)
			gotClose := resp.Close || resp.Header.Get("Connection") == "close"
			if gotClose != tt.wantClose || closed != tt.wantClose {
				t.Errorf("answer %d: Connection: close %v, connection closed %v; want %v", resp.StatusCode, gotClose, closed, tt.wantClose)
			}
		})
	}
}
