// Package notify sends DriftReports (kausality.io/v1alpha1) to the
// --drift-webhook-url endpoints.
//
// Delivery never blocks or fails the write path: Enqueue (and Observe,
// Detected, Resolved) only update an in-memory table and put the report on
// a bounded queue per URL without waiting; when a queue is full the report
// is dropped for that URL, counted and logged. One worker per URL POSTs the
// JSON report, in queue order, retrying transport errors, 5xx and 429 with
// exponential backoff (Retry-After honoured, capped by the maximum
// backoff); other responses are final.
//
// Deduplication and resolution are per open drift. A Detected report opens
// a drift, identified by ID(parent, child, changes). While it is open, the
// same drift is not queued again for a URL it is queued for or was
// delivered to; a delivery that failed or was dropped does not count as
// sent, so the next occurrence queues it again. Resolved closes the open
// drifts of a (parent, child) pair and sends, to each URL that got the
// Detected report, a Resolved report with the same id. Without an open,
// delivered Detected report nothing is sent. After resolution, a drift of
// the pair (the same or another) is Detected again. A Detected report at a
// higher parent generation than an open drift of the same pair first
// resolves the older one (ReasonParentChanged): the parent's spec changed
// in between.
//
// The table of open drifts is bounded: Config.MaxOpen pairs (least
// recently reported evicted first) and MaxOpenPerPair drifts per pair
// (oldest first). A forgotten drift is never resolved, and its next
// occurrence is reported again.
package notify

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// Defaults of Config.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultQueueSize      = 1000
	DefaultMaxAttempts    = 5
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
	DefaultMaxOpen        = 10000
)

// Config configures a Sender. Zero values mean the defaults.
type Config struct {
	// URLs receive every report (--drift-webhook-url). None: the Sender
	// is a no-op.
	URLs []string
	// Timeout bounds each POST (--drift-webhook-timeout).
	Timeout time.Duration
	// QueueSize bounds the queue of each URL.
	QueueSize int
	// MaxAttempts bounds the POSTs of one delivery (1 = no retry).
	MaxAttempts int
	// Backoff between attempts.
	Backoff Backoff
	// MaxOpen bounds the (parent, child) pairs with open drifts.
	MaxOpen int
	// HTTPClient posts the reports. nil: a client that does not follow
	// redirects (a 3xx is a final failure).
	HTTPClient *http.Client
	// Log receives failures and drops (rate-limited). nil: no logs.
	Log *zap.Logger
	// Clock drives the backoff. nil: the real clock.
	Clock Clock
	// Registerer receives the metrics. nil: not registered.
	Registerer prometheus.Registerer
}

// Result says what Enqueue did. Callers may ignore it.
type Result string

// Results.
const (
	// Disabled: the Sender has no URLs (or is nil).
	Disabled Result = "Disabled"
	// Ignored: no report to send (no phase, no parent, dry-run).
	Ignored Result = "Ignored"
	// Queued: queued for at least one URL.
	Queued Result = "Queued"
	// Deduplicated: the drift is open and queued or delivered everywhere.
	Deduplicated Result = "Deduplicated"
	// NotOpen: Resolved without an open Detected report delivered or
	// queued anywhere: nothing to send.
	NotOpen Result = "NotOpen"
	// Dropped: queued nowhere (queues full, or shut down).
	Dropped Result = "Dropped"
)

// Sender delivers DriftReports. Its methods are safe for concurrent use and
// on a nil *Sender (no-op).
type Sender struct {
	cfg     Config
	log     *zap.Logger
	clock   Clock
	client  *http.Client
	m       *metrics
	targets []*target

	mu       sync.Mutex
	open     *openTable
	closed   bool // no more reports accepted
	started  bool
	lastDrop time.Time
	drops    int // since the last drop log

	stopping  chan struct{} // closed by Shutdown: drain and exit
	ctx       context.Context
	cancel    context.CancelFunc // hard stop: in-flight deliveries cancelled
	wg        sync.WaitGroup
	closeOnce sync.Once
	finish    sync.Once

	// onDone, if set, is called by the worker after each job (tests).
	onDone func(done)
}

// New validates cfg and returns a Sender. Call Start to deliver.
func New(cfg Config) (*Sender, error) {
	s := &Sender{cfg: cfg}
	if len(cfg.URLs) == 0 {
		return s, nil
	}
	if s.cfg.Timeout <= 0 {
		s.cfg.Timeout = DefaultTimeout
	}
	if s.cfg.QueueSize <= 0 {
		s.cfg.QueueSize = DefaultQueueSize
	}
	if s.cfg.MaxAttempts <= 0 {
		s.cfg.MaxAttempts = DefaultMaxAttempts
	}
	if s.cfg.Backoff.Initial <= 0 {
		s.cfg.Backoff.Initial = DefaultBackoffInitial
	}
	if s.cfg.Backoff.Max <= 0 {
		s.cfg.Backoff.Max = max(DefaultBackoffMax, s.cfg.Backoff.Initial)
	}
	if s.cfg.MaxOpen <= 0 {
		s.cfg.MaxOpen = DefaultMaxOpen
	}
	s.log = cfg.Log
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.Named("driftreport")
	s.clock = cfg.Clock
	if s.clock == nil {
		s.clock = realClock{}
	}
	s.client = cfg.HTTPClient
	if s.client == nil {
		s.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	for i, raw := range cfg.URLs {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("drift webhook URL #%d: %w", i, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("drift webhook URL #%d: want http(s)://host/..., got scheme %q host %q", i, u.Scheme, u.Host)
		}
		s.targets = append(s.targets, &target{idx: i, url: raw, name: u.Scheme + "://" + u.Host + u.Path,
			queue: make(chan *job, s.cfg.QueueSize)})
	}
	s.open = newOpenTable(s.cfg.MaxOpen)
	s.stopping = make(chan struct{})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.m = newMetrics()
	if cfg.Registerer != nil {
		if err := s.m.register(cfg.Registerer, s); err != nil {
			return nil, fmt.Errorf("registering drift report metrics: %w", err)
		}
	}
	return s, nil
}

// Enabled reports whether reports are sent anywhere.
func (s *Sender) Enabled() bool { return s != nil && len(s.targets) > 0 }

// Start starts one delivery worker per URL and returns. Reports enqueued
// before Start wait in the queues. When ctx is done, delivery stops hard:
// in-flight POSTs are cancelled and what is queued is dropped; call
// Shutdown first to drain.
func (s *Sender) Start(ctx context.Context) {
	if !s.Enabled() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.started {
		return
	}
	s.started = true
	for _, t := range s.targets {
		s.wg.Add(1)
		go s.run(t)
	}
	go func() {
		select {
		case <-ctx.Done():
			s.stop()
		case <-s.ctx.Done():
		}
	}()
}

// Shutdown stops accepting reports, delivers what is queued (retries
// included) and returns when the queues are empty, or when ctx is done: then
// in-flight POSTs are cancelled, the rest is dropped and ctx.Err() is
// returned. Safe to call more than once and without Start (then what is
// queued is dropped).
func (s *Sender) Shutdown(ctx context.Context) error {
	if !s.Enabled() {
		return nil
	}
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.stopping)
	})
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.stop()
	return err
}

// stop cancels in-flight deliveries, waits for the workers and drops what
// is left in the queues.
func (s *Sender) stop() {
	s.finish.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		for _, t := range s.targets {
			for {
				select {
				case j := <-t.queue:
					s.m.dropped.WithLabelValues(string(j.phase)).Inc()
					s.settle(t, j, canceled)
					continue
				default:
				}
				break
			}
		}
	})
}

// OpenDrifts returns the number of open drifts.
func (s *Sender) OpenDrifts() int {
	if !s.Enabled() {
		return 0
	}
	return int(s.open.drifts.Load())
}

// Detected enqueues r as a Detected report.
func (s *Sender) Detected(r DriftReport) Result {
	r.Spec.Phase = PhaseDetected
	return s.Enqueue(r)
}

// Resolved resolves the open drifts of the pair r.Spec.Parent, r.Spec.Child
// (only the one with id r.Spec.ID if set). Only the references of the
// parent and the child are needed; Reason, Request, the objects and the
// parent's generations, if set, describe the resolving write.
func (s *Sender) Resolved(r DriftReport) Result {
	r.Spec.Phase = PhaseResolved
	return s.Enqueue(r)
}

// Enqueue queues r by its phase without blocking. A Detected report without
// an id gets ID(parent, child, changes). The objects of r are serialized
// here, and only if r is queued. Whoever built r, a Secret's values never
// leave: they are redacted first.
func (s *Sender) Enqueue(r DriftReport) Result {
	if !s.Enabled() {
		return Disabled
	}
	r.APIVersion, r.Kind = APIVersion, Kind
	redactSecrets(&r.Spec)
	switch r.Spec.Phase {
	case PhaseDetected:
		return s.detected(r)
	case PhaseResolved:
		return s.resolved(r)
	}
	return Ignored
}

// Observe sends what the decision of a write calls for. Call it once the
// outcome of the write is known: after a denial, or after the upstream
// accepted the write (a failed write resolves nothing and its drift will be
// retried). Nothing is sent for dry-run writes.
//
//   - d.Report Detected: a Detected report.
//   - d.Report Resolved (drift approved): Resolved, ReasonApproved.
//   - the parent's controller reconciles a changed parent (Expected):
//     Resolved, ReasonParentChanged.
//   - an allowed DELETE of the child: Resolved, ReasonChildDeleted.
//
// The Resolved cases cost one atomic load while no drift is open at all, a
// map lookup under the lock otherwise.
func (s *Sender) Observe(d *decision.Decision, w Write) Result {
	if !s.Enabled() {
		return Disabled
	}
	if d == nil || d.Parent == nil || w.DryRun {
		return Ignored
	}
	var reason string
	switch {
	case d.Report == decision.ReportDetected:
		return s.Enqueue(FromDecision(d, w))
	case d.Report == decision.ReportResolved:
		reason = ReasonApproved
	case d.Category == decision.Expected:
		reason = ReasonParentChanged
	case w.Operation == decision.Delete && d.Result == decision.Allow:
		reason = ReasonChildDeleted
	default:
		return Ignored
	}
	if s.open.drifts.Load() == 0 {
		return NotOpen // the common case, without a lock
	}
	r := FromDecision(d, w)
	r.Spec.Phase, r.Spec.Reason = PhaseResolved, reason
	return s.Enqueue(r)
}
