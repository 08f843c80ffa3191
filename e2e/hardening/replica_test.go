//go:build hardening

package hardening

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// replica is one kausality-proxy process. It reaches kube-apiserver
// through its own relay, so that a test can cut it off from kube-apiserver
// (every upstream connection, its informers' watches included) while the
// other replica keeps working.
type replica struct {
	name       string
	dir        string
	args       []string
	url        string
	metricsURL string
	caData     []byte
	relay      *framework.Relay

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// newReplica prepares a replica (ports, kubeconfig, certificate directory)
// with identity as its upstream credentials. start runs it.
func newReplica(name string, identity *rest.Config) (*replica, error) {
	apiserver, err := url.Parse(env.cp.Host)
	if err != nil {
		return nil, err
	}
	relay, err := framework.NewRelay(apiserver.Host)
	if err != nil {
		return nil, err
	}
	upstream := rest.CopyConfig(identity)
	upstream.Host = "https://" + relay.Addr()
	upstream.TLSClientConfig.ServerName = apiserver.Hostname()
	dir := filepath.Join(env.workDir, name)
	kubeconfig := filepath.Join(dir, "upstream.kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, upstream); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &replica{
		name:       name,
		dir:        dir,
		relay:      relay,
		url:        fmt.Sprintf("https://127.0.0.1:%d", port),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d", metricsPort),
		args: []string{
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(dir, "certs"),
			"--upstream-kubeconfig=" + kubeconfig,
			"--client-ca-file=" + env.cp.ClientCAFile,
			"--default-mode=enforce",
			"--metrics-bind-address=" + fmt.Sprintf("127.0.0.1:%d", metricsPort),
			"--shutdown-timeout=5s",
			"--drift-namespace=" + recordNamespace,
			"--approval-reservation-orphan-age=30s",
			// An approval whose write got no clear answer goes back once
			// the write can no longer land: 10s after this.
			"--request-timeout=30s",
		},
	}
	return r, nil
}

// freePort asks the kernel for a free loopback port. The replica binds it
// moments later (and again after a restart: Go listeners set SO_REUSEADDR).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the binary. Its log is appended to <dir>/kausality-proxy.log.
func (r *replica) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(r.dir, "kausality-proxy.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(env.binary, r.args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, and killed with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("%s: %w", r.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(done)
	}()
	r.cmd, r.done = cmd, done
	return nil
}

// kill ends the process with SIGKILL: no draining, no goodbye to clients.
func (r *replica) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// stop ends the process with SIGTERM, as a rollout does.
func (r *replica) stop() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	r.relay.Down()
}

func (r *replica) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd.Process.Pid
}

// readyz answers the replica's /readyz: the code, or 0 when it cannot be
// reached.
func (r *replica) readyz() (int, string) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(r.metricsURL + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// readiness is what waitReady saw.
type readiness struct {
	// notReady counts the answers of a running replica that were not 200,
	// by body ("caches: ...", "upstream: ...").
	notReady map[string]int
	took     time.Duration
}

// waitReady polls /readyz until it answers 200, and loads the replica's
// serving certificate (it writes a self-signed one on first start).
func (r *replica) waitReady(ctx context.Context) (readiness, error) {
	start := time.Now()
	seen := readiness{notReady: map[string]int{}}
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		code, body := r.readyz()
		if code == http.StatusOK {
			break
		}
		if code != 0 {
			seen.notReady[strings.SplitN(body, ":", 2)[0]]++
		}
		select {
		case <-ctx.Done():
			return seen, fmt.Errorf("%s: /readyz %d %q (log %s)", r.name, code, body, filepath.Join(r.dir, "kausality-proxy.log"))
		case <-done:
			return seen, fmt.Errorf("%s exited (log %s)", r.name, filepath.Join(r.dir, "kausality-proxy.log"))
		case <-time.After(10 * time.Millisecond):
		}
	}
	seen.took = time.Since(start)
	ca, err := os.ReadFile(filepath.Join(r.dir, "certs", "kausality-proxy.crt"))
	if err != nil {
		return seen, err
	}
	r.caData = ca
	return seen, nil
}

// through points cfg's credentials at this replica.
func (r *replica) through(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Host = r.url
	out.TLSClientConfig.CAData = r.caData
	out.TLSClientConfig.CAFile = ""
	out.TLSClientConfig.ServerName = ""
	return out
}

// rssKiB is the replica's resident set size (VmRSS in /proc/<pid>/status).
func (r *replica) rssKiB() (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", r.pid())
}

// cpu is the replica's user plus system CPU time so far (utime and stime
// in /proc/<pid>/stat).
func (r *replica) cpu() (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.pid()))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces: state is field 3, utime 14 and stime 15.
	i := bytes.LastIndexByte(raw, ')')
	fields := strings.Fields(string(raw[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", r.pid())
	}
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}
