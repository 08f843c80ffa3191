package config

import (
	"bytes"
	"context"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
)

// DefaultReloadInterval is how often the file is checked when no interval
// is given.
const DefaultReloadInterval = 2 * time.Second

// Watcher holds the current configuration and reloads it when the file
// changes. Polling the content (not inotify) also sees the symlink swap a
// mounted ConfigMap goes through.
type Watcher struct {
	path     string
	interval time.Duration
	log      *zap.Logger
	current  atomic.Pointer[Config]
	last     []byte
	reloads  atomic.Int64
	failures atomic.Int64
}

// NewWatcher loads path once; an invalid file is an error (the proxy must
// refuse to start). An empty path gives a Watcher that always returns
// Default().
func NewWatcher(path string, interval time.Duration, log *zap.Logger) (*Watcher, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	w := &Watcher{path: path, interval: interval, log: log}
	if path == "" {
		w.current.Store(Default())
		return w, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, &fileError{path: path, err: err}
	}
	w.current.Store(cfg)
	w.last = data
	return w, nil
}

type fileError struct {
	path string
	err  error
}

func (e *fileError) Error() string { return e.path + ": " + e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }

// Current is the configuration in force.
func (w *Watcher) Current() *Config { return w.current.Load() }

// Reloads counts successful reloads.
func (w *Watcher) Reloads() int64 { return w.reloads.Load() }

// Failures counts reloads rejected as invalid.
func (w *Watcher) Failures() int64 { return w.failures.Load() }

// Run polls until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	if w.path == "" {
		return
	}
	// The file was read when the watcher was made: the first check is
	// an interval later.
	select {
	case <-ctx.Done():
		return
	case <-time.After(w.interval):
	}
	wait.UntilWithContext(ctx, func(context.Context) { w.Check() }, w.interval)
}

// Check reloads the file if its content changed.
func (w *Watcher) Check() {
	data, err := os.ReadFile(w.path)
	if err != nil {
		w.failures.Add(1)
		w.log.Error("cannot read the config file; keeping the last good configuration", zap.String("path", w.path), zap.Error(err))
		return
	}
	if bytes.Equal(data, w.last) {
		return
	}
	w.last = data
	cfg, err := Parse(data)
	if err != nil {
		w.failures.Add(1)
		w.log.Error("invalid config file; keeping the last good configuration", zap.String("path", w.path), zap.Error(err))
		return
	}
	w.current.Store(cfg)
	w.reloads.Add(1)
	w.log.Info("config file reloaded", zap.String("path", w.path), zap.Int("controllers", len(cfg.Controllers)))
}
