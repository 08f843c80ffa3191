package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// apiServerProcess is a kube-apiserver started by RestartAPIServer, which
// envtest does not know about: Stop ends it.
type apiServerProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// RestartAPIServer kills kube-apiserver with SIGKILL (no graceful shutdown:
// in-flight requests and watches break as in a crash) and starts it again
// with the same command line, so it serves on the same port with the same
// certificates, service-account key and etcd. It returns once the new
// process answers /readyz. etcd keeps running throughout.
//
// envtest's own Stop and Start cannot do this: stopping removes the
// generated certificate directory and the next start makes a new CA.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return errStopped
	}
	prev := cp.restartedAPIServer
	cp.mu.Unlock()

	var (
		pid  int
		args []string
		err  error
	)
	if prev != nil {
		pid, args = prev.cmd.Process.Pid, prev.cmd.Args[1:]
	} else if pid, args, err = cp.envtestAPIServer(); err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("testenv: killing kube-apiserver (pid %d): %w", pid, err)
	}
	if prev != nil {
		<-prev.done
	} else if err := waitGone(ctx, pid); err != nil {
		return err
	}

	logFile, err := os.OpenFile(cp.APIServerLogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(cp.BinDir, BinKubeAPIServer), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("testenv: restarting kube-apiserver: %w", err)
	}
	p := &apiServerProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	cp.mu.Lock()
	cp.restartedAPIServer = p
	cp.mu.Unlock()
	return cp.waitAPIServerReady(ctx, p)
}

// envtestAPIServer finds the kube-apiserver envtest started: the child of
// this process running the harness's binary. Its command line is read back
// from /proc, which keeps every flag envtest rendered.
func (cp *ControlPlane) envtestAPIServer() (int, []string, error) {
	want := filepath.Join(cp.BinDir, BinKubeAPIServer)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, fmt.Errorf("testenv: restarting kube-apiserver needs /proc: %w", err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentPID(pid); err != nil || ppid != self {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != want {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			return 0, nil, err
		}
		parts := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		return pid, parts[1:], nil
	}
	return 0, nil, fmt.Errorf("testenv: no kube-apiserver (%s) is a child of this process", want)
}

// parentPID reads the parent's pid from /proc/<pid>/stat. The command name
// (in parentheses) may contain spaces, so fields are counted after it.
func parentPID(pid int) (int, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(raw[i+1:]))
	if len(fields) < 2 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return strconv.Atoi(fields[1])
}

// waitGone waits until pid has exited and been reaped (envtest waits for its
// own child).
func waitGone(ctx context.Context, pid int) error {
	for {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); os.IsNotExist(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: kube-apiserver (pid %d) did not exit after SIGKILL: %w", pid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (cp *ControlPlane) waitAPIServerReady(ctx context.Context, p *apiServerProcess) error {
	timeout := cp.opts.StartTimeout
	if timeout == 0 {
		timeout = defaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		body, err := cp.adminClient.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%v: %s", err, body)
		select {
		case <-p.done:
			return fmt.Errorf("testenv: the restarted kube-apiserver exited (log: %s)", cp.APIServerLogPath)
		case <-ctx.Done():
			return fmt.Errorf("testenv: the restarted kube-apiserver is not ready: %v (log: %s)", last, cp.APIServerLogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopRestartedAPIServer ends a kube-apiserver started by RestartAPIServer,
// before etcd goes.
func (cp *ControlPlane) stopRestartedAPIServer() error {
	cp.mu.Lock()
	p := cp.restartedAPIServer
	cp.restartedAPIServer = nil
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(defaultStopTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return nil
}
