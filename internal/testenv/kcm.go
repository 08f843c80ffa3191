package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// KubeControllerManagerUser is the identity kube-controller-manager
// authenticates as. The built-in system:kube-controller-manager
// ClusterRoleBinding grants it what it needs (including creating service
// accounts and tokens for --use-service-account-credentials).
const KubeControllerManagerUser = "system:kube-controller-manager"

// kcmReadyMarker is logged (at -v=1) by kube-controller-manager for each
// controller it starts, i.e. after it reached the apiserver, passed its
// health check, built its clients and discovered the API.
const kcmReadyMarker = "Controller starting"

const kcmStartTimeout = 90 * time.Second

// ControllerManager is a running kube-controller-manager process.
type ControllerManager struct {
	// LogPath holds the process's stdout+stderr. It outlives Stop (until the
	// control plane's work dir is removed).
	LogPath string
	// KubeconfigPath is the kubeconfig the process uses.
	KubeconfigPath string
	// Dir holds the files above.
	Dir string
	// Args is the full command line (without the binary).
	Args []string
	// Server is where it connects.
	Server string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}

	mu      sync.Mutex
	exitErr error
	stopped bool
}

// StartControllerManager starts an unmodified kube-controller-manager that
// connects to server (for example the proxy's URL), trusting caData as the
// server's CA. It authenticates with a client cert for
// system:kube-controller-manager minted by AddUser, and runs every default
// controller with --use-service-account-credentials, so each controller
// mints its own service-account token via TokenRequest through server.
//
// The process is stopped by cm.Stop or by cp.Stop. StartControllerManager
// returns once the controllers are starting, or fails with the log's tail if
// the process exits first.
//
//nolint:funlen // the controller manager's startup is one sequence of steps, each undone on failure
func (cp *ControlPlane) StartControllerManager(ctx context.Context, server string, caData []byte) (*ControllerManager, error) {
	if err := CheckBinaries(cp.BinDir, BinKubeControllerManager); err != nil {
		return nil, err
	}
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return nil, errStopped
	}
	cp.kcmSeq++
	seq := cp.kcmSeq
	cp.mu.Unlock()

	dir := filepath.Join(cp.WorkDir, fmt.Sprintf("kube-controller-manager-%d", seq))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg, err := cp.AddUser(KubeControllerManagerUser, nil)
	if err != nil {
		return nil, err
	}
	cfg.Host = server
	cfg.CAData = append([]byte(nil), caData...)
	cfg.CAFile = ""
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cfg); err != nil {
		return nil, err
	}

	flags := map[string]string{
		"kubeconfig":                       kubeconfig,
		"use-service-account-credentials":  "true",
		"service-account-private-key-file": cp.ServiceAccountKeyFile,
		"root-ca-file":                     cp.CAFile,
		"leader-elect":                     "false",
		"controllers":                      "*",
		// No serving port: nothing to collide on between parallel control
		// planes, and no delegated authn/authz lookups against the apiserver.
		"secure-port": "0",
		"v":           "2",
	}
	for k, v := range cp.opts.ExtraControllerManagerArgs {
		flags[strings.TrimPrefix(k, "--")] = v
	}
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([]string, 0, len(keys))
	for _, k := range keys {
		args = append(args, "--"+k+"="+flags[k])
	}

	cm := &ControllerManager{
		LogPath:        filepath.Join(dir, "kube-controller-manager.log"),
		KubeconfigPath: kubeconfig,
		Dir:            dir,
		Args:           args,
		Server:         server,
		done:           make(chan struct{}),
	}
	cm.logFile, err = os.OpenFile(cm.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cm.cmd = exec.Command(filepath.Join(cp.BinDir, BinKubeControllerManager), args...)
	cm.cmd.Stdout = cm.logFile
	cm.cmd.Stderr = cm.logFile
	cm.cmd.Dir = dir
	cm.cmd.SysProcAttr = sysProcAttr()
	if err := cm.cmd.Start(); err != nil {
		_ = cm.logFile.Close()
		return nil, fmt.Errorf("testenv: starting kube-controller-manager: %w", err)
	}
	go func() {
		err := cm.cmd.Wait()
		cm.mu.Lock()
		cm.exitErr = err
		cm.mu.Unlock()
		close(cm.done)
	}()

	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		_ = cm.Stop()
		return nil, errStopped
	}
	cp.kcms = append(cp.kcms, cm)
	cp.mu.Unlock()

	if err := cm.waitReady(ctx, flags["v"]); err != nil {
		_ = cm.Stop()
		return nil, err
	}
	return cm, nil
}

func (cm *ControllerManager) waitReady(ctx context.Context, verbosity string) error {
	ctx, cancel := context.WithTimeout(ctx, kcmStartTimeout)
	defer cancel()
	// Below -v=1 the marker is not logged: settle for the process surviving
	// a few seconds.
	if verbosity == "0" {
		select {
		case <-cm.done:
			return cm.exitError()
		case <-time.After(3 * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if data, err := os.ReadFile(cm.LogPath); err == nil && bytes.Contains(data, []byte(kcmReadyMarker)) {
			return nil
		}
		select {
		case <-cm.done:
			return cm.exitError()
		case <-ctx.Done():
			return fmt.Errorf("testenv: kube-controller-manager not ready (no %q in its log): %w\n%s", kcmReadyMarker, ctx.Err(), cm.logTail(40))
		case <-tick.C:
		}
	}
}

func (cm *ControllerManager) exitError() error {
	cm.mu.Lock()
	err := cm.exitErr
	cm.mu.Unlock()
	return fmt.Errorf("testenv: kube-controller-manager exited early (%v); log %s:\n%s", err, cm.LogPath, cm.logTail(40))
}

func (cm *ControllerManager) logTail(lines int) string {
	data, err := os.ReadFile(cm.LogPath)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Log returns the log captured so far.
func (cm *ControllerManager) Log() (string, error) {
	data, err := os.ReadFile(cm.LogPath)
	return string(data), err
}

// Exited reports whether the process has exited, and its exit error.
func (cm *ControllerManager) Exited() (bool, error) {
	select {
	case <-cm.done:
		cm.mu.Lock()
		defer cm.mu.Unlock()
		return true, cm.exitErr
	default:
		return false, nil
	}
}

// Stop terminates the process (SIGTERM, then SIGKILL after 10s) and waits
// for it. The log file is kept. Safe to call more than once.
func (cm *ControllerManager) Stop() error {
	cm.mu.Lock()
	if cm.stopped {
		cm.mu.Unlock()
		return nil
	}
	cm.stopped = true
	cm.mu.Unlock()
	defer cm.logFile.Close()

	select {
	case <-cm.done:
		return nil
	default:
	}
	_ = cm.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cm.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = cm.cmd.Process.Kill()
	select {
	case <-cm.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testenv: kube-controller-manager (pid %d) did not exit after SIGKILL", cm.cmd.Process.Pid)
	}
}

// Pid is the process id, for reading what the process costs (its memory
// in /proc) beside the proxy's.
func (cm *ControllerManager) Pid() int { return cm.cmd.Process.Pid }

// Config is a rest.Config with kube-controller-manager's own identity, as
// it connects (to Server).
func (cm *ControllerManager) Config() (*rest.Config, error) {
	return clientConfigFromFile(cm.KubeconfigPath)
}
