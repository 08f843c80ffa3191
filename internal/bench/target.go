package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// The three columns of every table.
const (
	direct = iota
	bare
	kausality
	numTargets
)

var targetNames = [numTargets]string{"direct", "bare", "kausality"}

// target is one way of reaching kube-apiserver, with the same client
// identity (a client certificate) for all three.
type target struct {
	idx  int
	name string
	base string
	// client speaks HTTP/2 (what client-go does).
	client *http.Client
	// upgrade speaks HTTP/1.1 and opens a new connection per request, as
	// kubectl exec does.
	upgrade *http.Client
	cfg     *rest.Config

	// Only for the proxies.
	ctl   *controlClient
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int
}

const userAgent = "kausality-bench/v1"

func newTarget(idx int, host string, caData []byte, user *rest.Config) (*target, error) {
	cfg := rest.CopyConfig(user)
	cfg.Host = host
	cfg.TLSClientConfig.CAData = caData
	cfg.TLSClientConfig.CAFile = ""
	cfg.TLSClientConfig.ServerName = ""
	cfg.UserAgent = userAgent
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	tlsCfg = tlsCfg.Clone()
	tlsCfg.NextProtos = []string{"http/1.1"}
	return &target{
		idx:     idx,
		name:    targetNames[idx],
		base:    strings.TrimSuffix(host, "/"),
		client:  &http.Client{Transport: rt},
		upgrade: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true, ForceAttemptHTTP2: false}},
		cfg:     cfg,
	}, nil
}

// req is one HTTP request of an operation.
type req struct {
	method, path, contentType, accept string
	body                              []byte
	header                            http.Header
	// want is the expected status code (0: any 2xx).
	want int
	// discard drops the body instead of returning it (large LISTs).
	discard bool
	// upgrade uses the HTTP/1.1, one-connection-per-request client.
	upgrade bool
}

// resp is what came back; elapsed runs from sending the request to having
// read the last byte of the body.
type resp struct {
	code    int
	body    []byte
	bytes   int64
	header  http.Header
	elapsed time.Duration
}

func (t *target) do(ctx context.Context, r req) (resp, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	hr, err := http.NewRequestWithContext(ctx, r.method, t.base+r.path, body)
	if err != nil {
		return resp{}, err
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	if r.contentType != "" {
		hr.Header.Set("Content-Type", r.contentType)
	}
	accept := r.accept
	if accept == "" {
		accept = "application/json"
	}
	hr.Header.Set("Accept", accept)
	hr.Header.Set("User-Agent", userAgent)
	c := t.client
	if r.upgrade {
		c = t.upgrade
	}
	start := time.Now()
	hresp, err := c.Do(hr)
	if err != nil {
		return resp{}, fmt.Errorf("%s %s via %s: %w", r.method, r.path, t.name, err)
	}
	out := resp{code: hresp.StatusCode, header: hresp.Header}
	if r.discard {
		out.bytes, err = io.Copy(io.Discard, hresp.Body)
	} else {
		out.body, err = io.ReadAll(hresp.Body)
		out.bytes = int64(len(out.body))
	}
	out.elapsed = time.Since(start)
	_ = hresp.Body.Close()
	if err != nil {
		return out, fmt.Errorf("%s %s via %s: reading body: %w", r.method, r.path, t.name, err)
	}
	ok := out.code >= 200 && out.code < 300
	if r.want != 0 {
		ok = out.code == r.want
	}
	if !ok {
		snippet := out.body
		if len(snippet) > 400 {
			snippet = snippet[:400]
		}
		return out, fmt.Errorf("%s %s via %s: HTTP %d: %s", r.method, r.path, t.name, out.code, snippet)
	}
	return out, nil
}

// startChild starts a proxy child process and waits for its ready line.
func startChild(ctx context.Context, spec childSpec) (*target, childReady, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, childReady{}, err
	}
	specJSON, _ := json.Marshal(spec)
	cmd := exec.Command(self, "child", string(specJSON))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, childReady{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, childReady{}, err
	}
	stderr, err := os.Create(filepath.Join(spec.WorkDir, spec.Role+".stderr"))
	if err != nil {
		return nil, childReady{}, err
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, childReady{}, err
	}
	t := &target{cmd: cmd, stdin: stdin, pid: cmd.Process.Pid}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var ready childReady
	select {
	case line, ok := <-lines:
		if !ok {
			t.stop()
			return nil, ready, fmt.Errorf("%s child exited before it was ready; see %s", spec.Role, stderr.Name())
		}
		if err := json.Unmarshal([]byte(line), &ready); err != nil {
			t.stop()
			return nil, ready, fmt.Errorf("%s child: bad ready line %q: %w", spec.Role, line, err)
		}
	case <-time.After(90 * time.Second):
		t.stop()
		return nil, ready, fmt.Errorf("%s child not ready after 90s; see %s", spec.Role, stderr.Name())
	case <-ctx.Done():
		t.stop()
		return nil, ready, ctx.Err()
	}
	if ready.Err != "" {
		t.stop()
		return nil, ready, fmt.Errorf("%s child: %s", spec.Role, ready.Err)
	}
	t.ctl = &controlClient{base: ready.ControlURL, http: &http.Client{Timeout: 60 * time.Second}}
	return t, ready, nil
}

// stop ends a child this harness started: closing its stdin asks it to
// shut down; it is killed (by its pid) if it does not within 10s.
func (t *target) stop() {
	if t.cmd == nil {
		return
	}
	_ = t.stdin.Close()
	done := make(chan struct{})
	go func() { _ = t.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = t.cmd.Process.Kill()
		<-done
	}
	t.cmd = nil
}
