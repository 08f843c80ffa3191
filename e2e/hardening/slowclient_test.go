//go:build hardening

package hardening

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/internal/reliability"
)

const (
	// adminGETs are sent before and during each attack.
	adminGETs = 100
	// slowLorisConns dribble their request headers one byte a second.
	slowLorisConns = 200
	// idleConns complete the TLS handshake and send nothing.
	idleConns = 500
	// headerLimit is the serving port's limit on request headers
	// (kube-apiserver's, 1 MiB), beyond which it answers 431.
	headerLimit = 1 << 20
	// closeWait bounds how long an attack waits for the replica to close
	// its connections (its read-header timeout is 32s).
	closeWait = 45 * time.Second
)

// TestSlowClients attacks one replica with slow-loris connections, huge
// headers and many idle TLS connections, and measures an administrator's
// GETs (each on a new connection, so each needs the replica to accept and
// handshake) before and during each attack. Every GET must succeed;
// latencies are reported, not asserted: the machine is shared.
func TestSlowClients(t *testing.T) {
	target := env.replicas[0]
	if _, err := target.waitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	admin, err := env.cp.AddUser("hardening-admin", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	get, err := adminGetter(target.through(admin))
	if err != nil {
		t.Fatal(err)
	}
	baseline, failures := measure(get, adminGETs)
	if failures != nil {
		t.Fatalf("admin GETs before any attack failed: %v", failures)
	}
	b50, b99 := percentile(baseline, 50), percentile(baseline, 99)
	t.Logf("baseline: admin GET p50 %.1fms p99 %.1fms", b50, b99)
	host := strings.TrimPrefix(target.url, "https://")

	attacks := []struct {
		name, what string
		conns      int
		run        func(stop <-chan struct{}) (notes string)
	}{
		{
			name:  "slow loris",
			what:  fmt.Sprintf("%d TLS connections sending a request's headers one byte per second", slowLorisConns),
			conns: slowLorisConns,
			run:   func(stop <-chan struct{}) string { return slowLoris(t, host, stop) },
		},
		{
			name:  "huge headers",
			what:  fmt.Sprintf("8 clients in a loop sending requests with headers just under (%d KiB) and over (%d KiB) the %d KiB limit", (headerLimit-8<<10)>>10, (headerLimit+64<<10)>>10, headerLimit>>10),
			conns: 8,
			run:   func(stop <-chan struct{}) string { return hugeHeaders(t, host, stop) },
		},
		{
			name:  "idle connections",
			what:  fmt.Sprintf("%d TLS connections that complete the handshake and send nothing", idleConns),
			conns: idleConns,
			run:   func(stop <-chan struct{}) string { return idleConnections(t, host, stop) },
		},
	}
	for _, a := range attacks {
		stop := make(chan struct{})
		notes := make(chan string, 1)
		go func() { notes <- a.run(stop) }()
		// Let the attack take hold before measuring.
		time.Sleep(3 * time.Second)
		during, failures := measure(get, adminGETs)
		close(stop)
		note := <-notes
		for _, f := range failures {
			t.Errorf("%s: an admin GET failed: %v", a.name, f)
		}
		fig := reliability.Attack{
			Name: a.name, What: a.what, Connections: a.conns,
			AdminGETs: adminGETs, Failed: len(failures),
			BaselineP50Ms: b50, BaselineP99Ms: b99,
			P50Ms: percentile(during, 50), P99Ms: percentile(during, 99),
			Notes: note,
		}
		env.figures.SlowClients = append(env.figures.SlowClients, fig)
		t.Logf("%s: admin GET p50 %.1fms p99 %.1fms (baseline %.1f/%.1f), %d failed; %s", a.name, fig.P50Ms, fig.P99Ms, b50, b99, fig.Failed, note)
	}
}

// adminGetter returns a GET of /api/v1/namespaces/default that opens a new
// connection each time.
func adminGetter(cfg *rest.Config) (func() error, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	client := &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true},
	}
	url := cfg.Host + "/api/v1/namespaces/default"
	return func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
		}
		return nil
	}, nil
}

// measure sends n GETs one after another and returns their latencies in
// milliseconds and the errors of those that failed.
func measure(get func() error, n int) ([]float64, []error) {
	var ms []float64
	var failures []error
	for range n {
		start := time.Now()
		if err := get(); err != nil {
			failures = append(failures, err)
			continue
		}
		ms = append(ms, float64(time.Since(start).Microseconds())/1000)
	}
	return ms, failures
}

func percentile(ms []float64, p float64) float64 {
	if len(ms) == 0 {
		return 0
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// dialTLS opens a TLS connection to the replica offering protocol (ALPN).
func dialTLS(host, protocol string) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second}
	return tls.DialWithDialer(d, "tcp", host, &tls.Config{
		InsecureSkipVerify: true, // the attackers do not care who they talk to
		NextProtos:         []string{protocol},
	})
}

// closedBy watches conns until each is closed by the replica (a read
// returns an error) or the deadline passes, and summarizes when.
type closures struct {
	mu     sync.Mutex
	after  []time.Duration
	opened int
}

func (c *closures) watch(conn net.Conn, opened time.Time, deadline time.Time) {
	c.mu.Lock()
	c.opened++
	c.mu.Unlock()
	go func() {
		_ = conn.SetReadDeadline(deadline)
		buf := make([]byte, 512)
		for {
			if _, err := conn.Read(buf); err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					c.mu.Lock()
					c.after = append(c.after, time.Since(opened))
					c.mu.Unlock()
				}
				return
			}
		}
	}()
}

func (c *closures) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.after) == 0 {
		return fmt.Sprintf("the replica closed none of %d connections within %s", c.opened, closeWait)
	}
	s := append([]time.Duration(nil), c.after...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("the replica closed %d of %d connections, after %.1fs (median; first %.1fs, last %.1fs)",
		len(s), c.opened, s[len(s)/2].Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
}

func (c *closures) all() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.after) == c.opened
}

// waitClosed waits until every watched connection was closed or closeWait
// has passed since start.
func (c *closures) waitClosed(start time.Time) {
	for !c.all() && time.Since(start) < closeWait {
		time.Sleep(200 * time.Millisecond)
	}
}

func slowLoris(t *testing.T, host string, stop <-chan struct{}) string {
	start := time.Now()
	deadline := start.Add(closeWait)
	c := &closures{}
	var conns []net.Conn
	for range slowLorisConns {
		conn, err := dialTLS(host, "http/1.1")
		if err != nil {
			t.Errorf("slow loris: dialing: %v", err)
			continue
		}
		conns = append(conns, conn)
		if _, err := io.WriteString(conn, "GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
			continue
		}
		c.watch(conn, start, deadline)
	}
	var dribbling sync.WaitGroup
	for _, conn := range conns {
		dribbling.Add(1)
		go func() {
			defer dribbling.Done()
			for time.Now().Before(deadline) {
				if _, err := conn.Write([]byte("a")); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}()
	}
	<-stop
	c.waitClosed(start)
	for _, conn := range conns {
		_ = conn.Close()
	}
	dribbling.Wait()
	return c.summary()
}

func hugeHeaders(t *testing.T, host string, stop <-chan struct{}) string {
	var mu sync.Mutex
	codes := map[string]map[int]int{"under": {}, "over": {}}
	var sent atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				kind, size := "under", headerLimit-8<<10
				if (i+n)%2 == 1 {
					kind, size = "over", headerLimit+64<<10
				}
				code := hugeHeaderRequest(host, size)
				sent.Add(1)
				mu.Lock()
				codes[kind][code]++
				mu.Unlock()
			}
		}()
	}
	<-stop
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(codes["over"]) == 0 || codes["over"][http.StatusRequestHeaderFieldsTooLarge] == 0 {
		t.Errorf("huge headers: no request over the limit was answered 431: %v", codes["over"])
	}
	return fmt.Sprintf("%d requests; answers under the limit %s, over it %s", sent.Load(), codeList(codes["under"]), codeList(codes["over"]))
}

// hugeHeaderRequest sends one unauthenticated request with a header of
// size bytes and returns the answer's code (0: the connection failed).
func hugeHeaderRequest(host string, size int) int {
	conn, err := dialTLS(host, "http/1.1")
	if err != nil {
		return 0
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriterSize(conn, 64<<10)
	_, _ = fmt.Fprintf(w, "GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Huge: %s\r\n\r\n", strings.Repeat("h", size))
	_ = w.Flush() // the replica may answer and close before it read everything
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func codeList(m map[int]int) string {
	var parts []string
	for code, n := range m {
		label := fmt.Sprint(code)
		if code == 0 {
			label = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", label, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func idleConnections(t *testing.T, host string, stop <-chan struct{}) string {
	start := time.Now()
	c := &closures{}
	var conns []net.Conn
	for i := range idleConns {
		// Half offer HTTP/2, half HTTP/1.1: the two servers behind the
		// port time out idle connections differently.
		protocol := "h2"
		if i%2 == 1 {
			protocol = "http/1.1"
		}
		conn, err := dialTLS(host, protocol)
		if err != nil {
			t.Errorf("idle connections: dialing: %v", err)
			continue
		}
		conns = append(conns, conn)
		c.watch(conn, start, start.Add(closeWait))
	}
	<-stop
	c.waitClosed(start)
	for _, conn := range conns {
		_ = conn.Close()
	}
	return c.summary()
}
