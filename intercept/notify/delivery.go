package notify

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// Clock is the time source of the retry backoff. k8s.io/utils/clock.Clock
// satisfies it.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

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
