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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"

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

// Clock is the time source of the retry backoff. k8s.io/utils/clock.Clock
// satisfies it.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Backoff is exponential: Initial before the first retry, doubled before
// each further one, at most Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// Delay returns the wait before retry n (n >= 1).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

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

// done describes a finished delivery job (for tests).
type done struct {
	url      int // index into Config.URLs
	id       string
	phase    Phase
	outcome  outcome
	attempts int
}

// outcome of a delivery.
type outcome string

const (
	delivered outcome = "Delivered"
	failed    outcome = "Failed"
	// skipped: a Resolved report whose Detected report never reached the
	// URL.
	skipped outcome = "Skipped"
	// canceled: stopped by shutdown.
	canceled outcome = "Canceled"
)

type target struct {
	idx   int
	url   string
	name  string // for logs: scheme://host/path, no credentials or query
	queue chan *job
}

type job struct {
	phase Phase
	body  []byte
	drift *openDrift
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

func (s *Sender) queued() int {
	n := 0
	for _, t := range s.targets {
		n += len(t.queue)
	}
	return n
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
// here, and only if r is queued.
func (s *Sender) Enqueue(r DriftReport) Result {
	if !s.Enabled() {
		return Disabled
	}
	r.APIVersion, r.Kind = APIVersion, Kind
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

func (s *Sender) detected(r DriftReport) Result {
	sp := &r.Spec
	if sp.ID == "" {
		sp.ID = ID(sp.Parent.Ref(), sp.Child.Ref(), sp.Changes)
	}
	key := pairKey(sp.Parent.Ref(), sp.Child.Ref())
	gen := sp.Parent.Generation

	// Phase 1, under the lock: what is to do? Cheap.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.dropAll(PhaseDetected)
	}
	var superseded []*openDrift
	need := true
	if p := s.open.get(key); p != nil {
		for _, od := range p.drifts {
			if gen > 0 && od.parentGen > 0 && od.parentGen < gen {
				superseded = append(superseded, od)
			} else if od.id == sp.ID {
				need = s.undelivered(od)
			}
		}
	}
	s.mu.Unlock()
	if !need && len(superseded) == 0 {
		s.m.deduplicated.WithLabelValues(string(PhaseDetected)).Inc()
		return Deduplicated
	}

	// Serialize outside the lock.
	var body []byte
	if need {
		var err error
		if body, err = json.Marshal(r); err != nil {
			s.log.Error("cannot serialize DriftReport", zap.String("id", sp.ID), zap.Error(err))
			return Ignored
		}
	}
	res := s.resolvedBodies(superseded, DriftReport{Spec: DriftReportSpec{Parent: sp.Parent, Reason: ReasonParentChanged}})

	// Phase 2, under the lock: open and queue. Pushes do not block.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.dropAllLocked(PhaseDetected)
	}
	for i, od := range superseded {
		s.closeLocked(od, res[i])
	}
	if !need {
		s.m.deduplicated.WithLabelValues(string(PhaseDetected)).Inc()
		return Deduplicated
	}
	var od *openDrift
	if p := s.open.get(key); p != nil {
		od = p.find(sp.ID)
	}
	if od == nil {
		light := *sp
		light.OldObject, light.NewObject = runtime.RawExtension{}, runtime.RawExtension{}
		light.Changes, light.Request.Groups = slices.Clone(light.Changes), slices.Clone(light.Request.Groups)
		od = &openDrift{id: sp.ID, key: key, parentGen: gen, spec: light, state: make([]deliveryState, len(s.targets))}
		s.open.add(od)
	}
	result := Deduplicated
	for _, t := range s.targets {
		if od.state[t.idx] != stateNone {
			continue
		}
		if s.pushLocked(t, &job{phase: PhaseDetected, body: body, drift: od}) {
			od.state[t.idx] = statePending
			result = Queued
		} else if result == Deduplicated {
			result = Dropped
		}
	}
	if result == Deduplicated {
		s.m.deduplicated.WithLabelValues(string(PhaseDetected)).Inc()
	}
	return result
}

// undelivered: od is not queued or delivered at some URL. Under s.mu.
func (s *Sender) undelivered(od *openDrift) bool {
	for _, st := range od.state {
		if st == stateNone {
			return true
		}
	}
	return false
}

func (s *Sender) resolved(r DriftReport) Result {
	key := pairKey(r.Spec.Parent.Ref(), r.Spec.Child.Ref())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.dropAll(PhaseResolved)
	}
	var ods []*openDrift
	if p := s.open.pairs[key]; p != nil {
		for _, od := range p.drifts {
			if r.Spec.ID == "" || od.id == r.Spec.ID {
				ods = append(ods, od)
			}
		}
	}
	s.mu.Unlock()
	if len(ods) == 0 {
		return NotOpen
	}

	bodies := s.resolvedBodies(ods, r)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.dropAllLocked(PhaseResolved)
	}
	result := NotOpen
	for i, od := range ods {
		switch s.closeLocked(od, bodies[i]) {
		case Queued:
			result = Queued
		case Dropped:
			if result == NotOpen {
				result = Dropped
			}
		}
	}
	return result
}

// resolvedBodies serializes the Resolved reports closing ods: the id, the
// changes and (unless r sets them) the parent, child and request of each
// Detected report; the reason, the objects and the rest from r.
func (s *Sender) resolvedBodies(ods []*openDrift, r DriftReport) [][]byte {
	if len(ods) == 0 {
		return nil
	}
	// Serialize the objects once for all.
	if err := rawify(&r.Spec); err != nil {
		s.log.Error("cannot serialize the objects of a Resolved DriftReport", zap.Error(err))
		r.Spec.OldObject, r.Spec.NewObject = runtime.RawExtension{}, runtime.RawExtension{}
	}
	out := make([][]byte, len(ods))
	for i, od := range ods {
		sp := od.spec // copy
		sp.Phase, sp.Reason = PhaseResolved, r.Spec.Reason
		if r.Spec.Parent.Kind != "" {
			sp.Parent = r.Spec.Parent
		}
		if r.Spec.Child.Kind != "" {
			sp.Child = r.Spec.Child
		}
		if r.Spec.Request.User != "" {
			sp.Request = r.Spec.Request
		}
		sp.OldObject, sp.NewObject = r.Spec.OldObject, r.Spec.NewObject
		b, err := json.Marshal(DriftReport{APIVersion: APIVersion, Kind: Kind, Spec: sp})
		if err != nil { // cannot happen: the objects are raw JSON by now
			s.log.Error("cannot serialize DriftReport", zap.String("id", sp.ID), zap.Error(err))
		}
		out[i] = b
	}
	return out
}

// rawify turns the objects of sp into raw JSON.
func rawify(sp *DriftReportSpec) error {
	for _, e := range [...]*runtime.RawExtension{&sp.OldObject, &sp.NewObject} {
		if e.Raw != nil || e.Object == nil {
			continue
		}
		b, err := json.Marshal(e.Object)
		if err != nil {
			return err
		}
		e.Raw, e.Object = b, nil
	}
	return nil
}

// closeLocked closes od and queues its Resolved report for every URL the
// Detected report is queued for or was delivered to. Under s.mu.
func (s *Sender) closeLocked(od *openDrift, body []byte) Result {
	if !od.open || body == nil {
		return NotOpen
	}
	s.open.remove(od)
	result := NotOpen
	for _, t := range s.targets {
		if od.state[t.idx] == stateNone {
			continue
		}
		if s.pushLocked(t, &job{phase: PhaseResolved, body: body, drift: od}) {
			result = Queued
		} else if result == NotOpen {
			result = Dropped
		}
	}
	return result
}

// pushLocked queues j for t without blocking. Under s.mu.
func (s *Sender) pushLocked(t *target, j *job) bool {
	select {
	case t.queue <- j:
		s.m.enqueued.WithLabelValues(string(j.phase)).Inc()
		return true
	default:
	}
	s.m.dropped.WithLabelValues(string(j.phase)).Inc()
	s.noteDropLocked(t, j, "queue full")
	return false
}

func (s *Sender) dropAll(phase Phase) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropAllLocked(phase)
}

func (s *Sender) dropAllLocked(phase Phase) Result {
	s.m.dropped.WithLabelValues(string(phase)).Add(float64(len(s.targets)))
	s.noteDropLocked(nil, &job{phase: phase}, "shut down")
	return Dropped
}

// noteDropLocked logs drops, at most one line a minute. Under s.mu.
func (s *Sender) noteDropLocked(t *target, j *job, why string) {
	s.drops++
	now := s.clock.Now()
	if !s.lastDrop.IsZero() && now.Sub(s.lastDrop) < time.Minute {
		return
	}
	fields := []zap.Field{zap.String("reason", why), zap.String("phase", string(j.phase)), zap.Int("dropsSinceLastLog", s.drops)}
	if t != nil {
		fields = append(fields, zap.String("url", t.name))
	}
	if j.drift != nil {
		fields = append(fields, zap.String("id", j.drift.id))
	}
	s.log.Warn("DriftReport dropped", fields...)
	s.lastDrop, s.drops = now, 0
}

func (s *Sender) run(t *target) {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case j := <-t.queue:
			s.process(t, j)
		case <-s.stopping:
			for {
				select {
				case <-s.ctx.Done():
					return
				case j := <-t.queue:
					s.process(t, j)
				default:
					return
				}
			}
		}
	}
}

func (s *Sender) process(t *target, j *job) {
	if j.phase == PhaseResolved {
		s.mu.Lock()
		delivered := j.drift.state[t.idx] == stateDelivered
		s.mu.Unlock()
		if !delivered {
			s.log.Debug("Resolved DriftReport skipped: its Detected report did not reach the URL",
				zap.String("id", j.drift.id), zap.String("url", t.name))
			s.report(t, j, skipped, 0)
			return
		}
	}
	out, attempts := s.deliver(t, j)
	switch out {
	case delivered:
		s.m.sent.WithLabelValues(string(j.phase)).Inc()
	case failed:
		s.m.failed.WithLabelValues(string(j.phase)).Inc()
	case canceled:
		s.m.dropped.WithLabelValues(string(j.phase)).Inc()
	}
	s.settle(t, j, out)
	s.report(t, j, out, attempts)
}

// settle records the outcome of a Detected delivery: only a delivered
// report counts as sent; anything else lets the next occurrence retry.
func (s *Sender) settle(t *target, j *job, out outcome) {
	if j.phase != PhaseDetected {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if out == delivered {
		j.drift.state[t.idx] = stateDelivered
	} else {
		j.drift.state[t.idx] = stateNone
	}
}

func (s *Sender) report(t *target, j *job, out outcome, attempts int) {
	if s.onDone != nil {
		s.onDone(done{url: t.idx, id: j.drift.id, phase: j.phase, outcome: out, attempts: attempts})
	}
}

// deliver POSTs j to t, retrying transport errors, 5xx and 429.
func (s *Sender) deliver(t *target, j *job) (outcome, int) {
	for attempt := 1; ; attempt++ {
		if s.ctx.Err() != nil {
			return canceled, attempt - 1
		}
		code, retryAfter, err := s.post(t, j.body)
		if err == nil && code >= 200 && code < 300 {
			return delivered, attempt
		}
		if s.ctx.Err() != nil {
			return canceled, attempt
		}
		retryable := err != nil || code >= 500 || code == http.StatusTooManyRequests
		if !retryable || attempt >= s.cfg.MaxAttempts {
			fields := []zap.Field{zap.String("url", t.name), zap.String("id", j.drift.id), zap.String("phase", string(j.phase)),
				zap.Int("attempts", attempt), zap.Bool("retryable", retryable)}
			if err != nil {
				fields = append(fields, zap.Error(err))
			} else {
				fields = append(fields, zap.Int("code", code))
			}
			s.log.Warn("DriftReport delivery failed", fields...)
			return failed, attempt
		}
		delay := s.cfg.Backoff.Delay(attempt)
		if retryAfter > delay {
			delay = min(retryAfter, s.cfg.Backoff.Max)
		}
		s.m.retries.WithLabelValues(string(j.phase)).Inc()
		select {
		case <-s.clock.After(delay):
		case <-s.ctx.Done():
			return canceled, attempt
		}
	}
}

// post sends one attempt. The response body is read (bounded) and
// discarded so the connection can be reused.
func (s *Sender) post(t *target, body []byte) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "kausality-proxy")
	resp, err := s.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL may carry credentials
		}
		return 0, 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	var retryAfter time.Duration
	if v := resp.Header.Get("Retry-After"); v != "" {
		if secs, err := strconv.Atoi(v); err == nil && secs > 0 {
			retryAfter = time.Duration(secs) * time.Second
		}
	}
	return resp.StatusCode, retryAfter, nil
}
