package drifts

import (
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// maxTrackedControllers bounds the controllers whose rate limits and
// floods are remembered; past it, the idle ones are forgotten.
const maxTrackedControllers = 4096

// controllerState is what the ledger remembers of one controller.
type controllerState struct {
	user    string
	limiter *rate.Limiter
	// flood is the open flood; nil when none.
	flood *flood
}

// flood is a run of suppressed drifts of one controller, reported once
// when it starts and once when it is over.
type flood struct {
	reason     string
	started    time.Time
	last       time.Time
	suppressed int
}

// controller returns the state of the controller of rec, made on first
// use. Call with l.mu held.
func (l *Ledger) controller(rec *Record) *controllerState {
	key := ControllerKey(rec.Report)
	c := l.controllers[key]
	if c != nil {
		return c
	}
	if len(l.controllers) >= maxTrackedControllers {
		l.forgetIdleControllers()
	}
	c = &controllerState{user: rec.Report.Spec.Request.User,
		limiter: rate.NewLimiter(rate.Limit(l.o.ControllerRate), l.o.ControllerBurst)}
	l.controllers[key] = c
	return c
}

// forgetIdleControllers drops the controllers with a full token bucket
// and no open flood: forgetting them changes nothing. Call with l.mu held.
func (l *Ledger) forgetIdleControllers() {
	now := l.o.Clock.Now()
	for key, c := range l.controllers {
		if c.flood == nil && c.limiter.TokensAt(now) >= float64(l.o.ControllerBurst) {
			delete(l.controllers, key)
		}
	}
}

// allow takes a token from the rate limit of rec's controller.
func (l *Ledger) allow(rec *Record) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.controller(rec).limiter.AllowN(l.o.Clock.Now(), 1)
}

// suppress counts a drift not recorded because of a quota or the rate
// limit. The first suppression of a flood is logged as a warning and
// counted in the floods metric; the rest only in the suppressed metric, so
// a flood of denied writes does not become a flood of log lines. A flood
// is over once its controller has had nothing suppressed for FloodQuiet.
func (l *Ledger) suppress(reason string, rec *Record) {
	l.m.suppressedByQuota.WithLabelValues(reason).Inc()
	now := l.o.Clock.Now()
	l.mu.Lock()
	c := l.controller(rec)
	var ended *flood
	if c.flood != nil && now.Sub(c.flood.last) >= l.o.FloodQuiet {
		ended, c.flood = c.flood, nil
	}
	started := c.flood == nil
	if started {
		c.flood = &flood{reason: reason, started: now}
	}
	c.flood.last = now
	c.flood.suppressed++
	l.mu.Unlock()
	if ended != nil {
		l.floodEnded(c.user, ended)
	}
	if started {
		l.m.floods.WithLabelValues(reason).Inc()
		l.log.Warn("DriftReports of a controller are suppressed: a drift record quota or rate limit is reached; further drifts of this controller are counted, not reported, until it has had none suppressed for a while. Reports of other controllers are not affected",
			zap.String("controller", c.user), zap.String("quota", reason), zap.String("why", quotaDescription(reason)),
			zap.String("parent", rec.Report.Spec.Parent.Kind+" "+rec.Report.Spec.Parent.Namespace+"/"+rec.Report.Spec.Parent.Name),
			zap.Duration("quietPeriod", l.o.FloodQuiet))
	}
}

// endQuietFloods closes the floods that have been quiet for FloodQuiet.
func (l *Ledger) endQuietFloods() {
	now := l.o.Clock.Now()
	type ending struct {
		user string
		f    *flood
	}
	var ends []ending
	l.mu.Lock()
	for _, c := range l.controllers {
		if c.flood != nil && now.Sub(c.flood.last) >= l.o.FloodQuiet {
			ends = append(ends, ending{c.user, c.flood})
			c.flood = nil
		}
	}
	l.mu.Unlock()
	for _, e := range ends {
		l.floodEnded(e.user, e.f)
	}
}

func (l *Ledger) floodEnded(user string, f *flood) {
	l.log.Info("a controller's DriftReports are no longer suppressed", zap.String("controller", user),
		zap.String("quota", f.reason), zap.Int("suppressed", f.suppressed), zap.Time("since", f.started))
}
