package notify

import (
	"time"

	"go.uber.org/zap"
)

// done describes a finished delivery job (for tests).
type done struct {
	url      int // index into Config.URLs
	id       string
	phase    Phase
	outcome  outcome
	attempts int
}

// outcome of a delivery.
// outcome is what became of one delivery.
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

func (s *Sender) queued() int {
	n := 0
	for _, t := range s.targets {
		n += len(t.queue)
	}
	return n
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
