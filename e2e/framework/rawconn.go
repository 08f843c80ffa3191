package framework

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// RawResponse is one answer read off a raw connection.
type RawResponse struct {
	Code   int
	Header http.Header
	Body   []byte
}

// TLSConfig is a client TLS configuration that trusts caPEM, presents cert
// (when not nil) and offers the ALPN protocols protos ("http/1.1", "h2").
func TLSConfig(caPEM []byte, cert *tls.Certificate, protos ...string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in the CA bundle")
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: protos}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg, nil
}

// RawHTTP1 writes request, the bytes of one or more HTTP/1.1 requests
// exactly as given, to a new TLS connection to addr, then reads answers
// until the server closes the connection or is silent for idle. It reports
// the answers read and whether the server closed the connection (rather
// than the read timing out). Nothing is normalized on the way: this is how
// a test sends what no well-behaved client would.
func RawHTTP1(addr string, cfg *tls.Config, request []byte, idle time.Duration) ([]RawResponse, bool, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	if _, err := conn.Write(request); err != nil {
		return nil, false, err
	}
	return ReadResponses(conn, idle)
}

// ReadResponses reads HTTP/1.1 answers from conn until it is closed or
// silent for idle.
func ReadResponses(conn net.Conn, idle time.Duration) ([]RawResponse, bool, error) {
	var out []RawResponse
	br := bufio.NewReader(conn)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				return out, false, nil
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
				return out, true, nil
			}
			// A reset or a TLS alert: the server is gone too.
			return out, true, nil //nolint:nilerr // a connection the server tore down counts as closed
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // 100 Continue and other interim answers precede the real one
		}
		out = append(out, RawResponse{Code: resp.StatusCode, Header: resp.Header, Body: bytes.Clone(body)})
	}
}
