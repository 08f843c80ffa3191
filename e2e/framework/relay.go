package framework

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Relay is a loopback TCP relay between the proxy and kube-apiserver. TLS
// passes through it untouched. Tests use it to take the upstream away (Down)
// and bring it back on the same address (Up), and to count the bytes the
// proxy sent upstream.
type Relay struct {
	target string
	addr   string

	mu       sync.Mutex
	listener net.Listener
	conns    map[net.Conn]struct{}
	sent     atomic.Int64
	accepted atomic.Int64
}

// NewRelay listens on a free loopback port and forwards to target. The
// port is below the kernel's range of ephemeral ports: while the relay is
// down, the port it gave up could otherwise become the local port of any
// outgoing connection (another test's), and listening on it again fail.
func NewRelay(target string) (*Relay, error) {
	l, err := listenBelowEphemeralPorts()
	if err != nil {
		return nil, err
	}
	r := &Relay{target: target, addr: l.Addr().String(), conns: map[net.Conn]struct{}{}}
	r.serve(l)
	return r, nil
}

// Addr is host:port of the relay.
func (r *Relay) Addr() string { return r.addr }

// BytesSent is how many bytes went from the proxy towards kube-apiserver.
func (r *Relay) BytesSent() int64 { return r.sent.Load() }

// Connections is how many connections the relay accepted.
func (r *Relay) Connections() int64 { return r.accepted.Load() }

// Down closes the listener and every open connection: the upstream is gone.
func (r *Relay) Down() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listener != nil {
		_ = r.listener.Close()
		r.listener = nil
	}
	for c := range r.conns {
		_ = c.Close()
	}
	r.conns = map[net.Conn]struct{}{}
}

// Up listens again on the same address.
func (r *Relay) Up() error {
	r.mu.Lock()
	if r.listener != nil {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	var (
		l   net.Listener
		err error
	)
	// A connection the relay closed may hold the port a moment longer.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if l, err = net.Listen("tcp", r.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("relay: listening again on %s: %w", r.addr, err)
	}
	r.serve(l)
	return nil
}

func (r *Relay) serve(l net.Listener) {
	r.mu.Lock()
	r.listener = l
	r.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			go r.pipe(in)
		}
	}()
}

func (r *Relay) track(c net.Conn, add bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if add {
		r.conns[c] = struct{}{}
	} else {
		delete(r.conns, c)
	}
}

func (r *Relay) pipe(in net.Conn) {
	out, err := net.Dial("tcp", r.target)
	if err != nil {
		_ = in.Close()
		return
	}
	r.track(in, true)
	r.track(out, true)
	defer func() {
		_ = in.Close()
		_ = out.Close()
		r.track(in, false)
		r.track(out, false)
	}()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(countingWriter{out, &r.sent}, in)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(in, out)
		done <- struct{}{}
	}()
	<-done
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// listenBelowEphemeralPorts listens on a free loopback port below the
// kernel's ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range),
// or on any free port where that range cannot be read or leaves no room.
func listenBelowEphemeralPorts() (net.Listener, error) {
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(data)); len(fields) == 2 {
			if n, err := strconv.Atoi(fields[0]); err == nil {
				low = n
			}
		}
	}
	const first = 10000
	if low-first >= 1000 {
		for range 100 {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(first+rand.IntN(low-first)))
			if err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}
