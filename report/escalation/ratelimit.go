package escalation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// Rate is a token bucket: Burst messages at once, then one every Every.
type Rate struct {
	Every time.Duration
	Burst int
}

// MessageLimits bound the drift messages, so that a controller denied in a
// loop (each retry of a create can be a new drift) cannot flood the
// channel, and many controllers together cannot either.
type MessageLimits struct {
	// PerController bounds the messages about one controller's drifts.
	PerController Rate
	// Total bounds all drift messages.
	Total Rate
	// SummaryAfter is how long after the first suppressed message the
	// summary of the suppressed ones is posted.
	SummaryAfter time.Duration
}

// DefaultMessageLimits are the limits of a Config that sets none.
var DefaultMessageLimits = MessageLimits{
	PerController: Rate{Every: 5 * time.Minute, Burst: 5},
	Total:         Rate{Every: 10 * time.Second, Burst: 30},
	SummaryAfter:  time.Minute,
}

// ErrSuppressed is when the message of the drift was not posted, to keep within
// the message limits. It is counted in the summary message instead.
var ErrSuppressed = errors.New("slack message suppressed by the message rate limit")

const (
	// maxTrackedControllers bounds the per-controller buckets; a full
	// bucket is dropped first, as it is the same as a new one.
	maxTrackedControllers = 1000
	// maxSummaryLines bounds the controllers one summary names.
	maxSummaryLines = 20
)

// messageLimiter decides whether a drift message may be posted now and
// counts the ones that may not.
type messageLimiter struct {
	limits MessageLimits

	mu            sync.Mutex
	total         *rate.Limiter
	perController map[string]*rate.Limiter
	suppressed    map[string]int
	// summaryDue: a summary is scheduled.
	summaryDue bool
}

func newMessageLimiter(l MessageLimits) *messageLimiter {
	def := DefaultMessageLimits
	if l.PerController.Every <= 0 || l.PerController.Burst <= 0 {
		l.PerController = def.PerController
	}
	if l.Total.Every <= 0 || l.Total.Burst <= 0 {
		l.Total = def.Total
	}
	if l.SummaryAfter <= 0 {
		l.SummaryAfter = def.SummaryAfter
	}
	return &messageLimiter{
		limits:        l,
		total:         rate.NewLimiter(rate.Every(l.Total.Every), l.Total.Burst),
		perController: map[string]*rate.Limiter{},
		suppressed:    map[string]int{},
	}
}

// allow takes a token from the controller's bucket and the total one, or
// from neither. When it refuses, it counts the message as suppressed and
// reports whether a summary is to be scheduled (none is yet).
func (m *messageLimiter) allow(controller string, now time.Time) (ok, scheduleSummary bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pc := m.controllerBucket(controller, now)
	own := pc.ReserveN(now, 1)
	if own.OK() && own.DelayFrom(now) == 0 {
		all := m.total.ReserveN(now, 1)
		if all.OK() && all.DelayFrom(now) == 0 {
			return true, false
		}
		all.CancelAt(now)
	}
	own.CancelAt(now)
	m.suppressed[controller]++
	scheduleSummary = !m.summaryDue
	m.summaryDue = true
	return false, scheduleSummary
}

func (m *messageLimiter) controllerBucket(controller string, now time.Time) *rate.Limiter {
	if b, ok := m.perController[controller]; ok {
		return b
	}
	if len(m.perController) >= maxTrackedControllers {
		for c, b := range m.perController {
			if b.TokensAt(now) >= float64(m.limits.PerController.Burst) {
				delete(m.perController, c)
			}
		}
	}
	b := rate.NewLimiter(rate.Every(m.limits.PerController.Every), m.limits.PerController.Burst)
	if len(m.perController) < maxTrackedControllers {
		m.perController[controller] = b
	}
	return b
}

// takeSuppressed returns the counts to summarize and forgets them.
func (m *messageLimiter) takeSuppressed() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.suppressed
	m.suppressed = map[string]int{}
	m.summaryDue = false
	return out
}

// giveBack restores counts whose summary could not be posted; it reports
// whether a summary is to be scheduled again.
func (m *messageLimiter) giveBack(counts map[string]int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c, n := range counts {
		m.suppressed[c] += n
	}
	schedule := !m.summaryDue
	m.summaryDue = true
	return schedule
}

// summaryText says how many messages of which controllers were
// suppressed, most first; "" when none were.
func summaryText(counts map[string]int) string {
	if len(counts) == 0 {
		return ""
	}
	controllers := make([]string, 0, len(counts))
	total := 0
	for c, n := range counts {
		controllers = append(controllers, c)
		total += n
	}
	slices.SortFunc(controllers, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a, b)
	})
	lines := []string{fmt.Sprintf(":mute: %d more drift messages were suppressed by the message rate limit. "+
		"The drifts are recorded and sent as DriftReports; list them with `kubectl kausality` or the drift-record ConfigMaps in the proxy's namespace.", total)}
	for i, c := range controllers {
		if i == maxSummaryLines {
			lines = append(lines, fmt.Sprintf("… and %d more controllers", len(controllers)-i))
			break
		}
		lines = append(lines, fmt.Sprintf("• %d more drifts from controller `%s` suppressed", counts[c], code(c)))
	}
	return truncate(strings.Join(lines, "\n"), maxSectionText)
}

// scheduleSummary posts the summary once the limits' SummaryAfter has
// passed.
func (e *Escalator) scheduleSummary() {
	time.AfterFunc(e.limiter.limits.SummaryAfter, func() {
		ctx, cancel := context.WithTimeout(context.Background(), clickTimeout)
		defer cancel()
		e.postSummary(ctx)
	})
}

// postSummary posts one message counting the suppressed drift messages
// per controller. A summary that cannot be posted is kept for the next
// attempt: suppressed messages are summarized, never lost.
func (e *Escalator) postSummary(ctx context.Context) {
	counts := e.limiter.takeSuppressed()
	text := summaryText(counts)
	if text == "" {
		return
	}
	_, _, err := e.api.PostMessageContext(ctx, e.channel, slack.MsgOptionText(text, false),
		slack.MsgOptionBlocks(section(text)))
	if err != nil {
		e.log.Warn("cannot post the summary of suppressed drift messages; retrying later", zap.Error(err))
		if e.limiter.giveBack(counts) {
			e.scheduleSummary()
		}
	}
}
