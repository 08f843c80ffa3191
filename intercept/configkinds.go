package intercept

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kausality-io/kausality-proxy/intercept/config"
)

// recheckUnserved is how long a configuration that names kinds
// kube-apiserver does not serve waits before they are looked up again: a
// CustomResourceDefinition installed after the file is seen within this
// time, and a lookup that finds nothing refreshes discovery.
const recheckUnserved = time.Minute

// kindChecker warns about the kinds the config file names that
// kube-apiserver does not serve. Such an entry matches nothing, without a
// word: a misspelt or miscased kind in ungatedChildKinds leaves its
// attempts gated, which in enforce mode refuses them. The file is read
// before discovery is, so this is a warning (a log line per entry when the
// file changes, and a gauge), not a refusal.
type kindChecker struct {
	settings func() *config.Config
	mapper   func() meta.RESTMapper
	// refresh reads discovery afresh (rate-limited by the store): the
	// mapper caches what it read, and a lookup that misses does not
	// refresh a cache that is still fresh.
	refresh func()
	// undiscovered are the groups whose discovery failed: their kinds are
	// unknown, not unserved.
	undiscovered func() (map[string]bool, error)
	now          func() time.Time
	log          *zap.Logger
	gauge        prometheus.Gauge

	checked *config.Config
	at      time.Time
	// problems are the unserved kinds last counted; unknown, those of
	// groups whose discovery failed, which are looked up again.
	problems, unknown int
}

// check looks the kinds of the configuration in force up when it changed,
// or when some were not served and recheckUnserved has passed.
func (c *kindChecker) check() {
	cfg, now := c.settings(), c.now()
	if cfg == c.checked && (c.problems+c.unknown == 0 || now.Sub(c.at) < recheckUnserved) {
		return
	}
	if len(cfg.NamedKinds) == 0 {
		c.checked, c.at, c.problems, c.unknown = cfg, now, 0, 0
		c.set(0)
		return
	}
	if c.refresh != nil {
		c.refresh()
	}
	var undiscovered map[string]bool
	var err error
	if c.undiscovered != nil {
		undiscovered, err = c.undiscovered()
	}
	var found []config.KindProblem
	if err == nil {
		found, err = config.UnservedKinds(cfg.NamedKinds, c.mapper())
	}
	if err != nil {
		// Discovery failed: nothing is known of the kinds. Asked again
		// at the next check.
		c.log.Debug("cannot look up the kinds the config file names", zap.Error(err))
		return
	}
	problems, unknown := found[:0:0], 0
	for _, p := range found {
		if undiscovered[p.Kind.Group] {
			unknown++
			continue
		}
		problems = append(problems, p)
	}
	if cfg != c.checked {
		for _, p := range problems {
			c.log.Warn("the config file names a kind kube-apiserver does not serve", zap.String("problem", p.String()))
		}
	} else if len(problems) < c.problems {
		c.log.Info("kinds the config file names are served now", zap.Int("stillUnserved", len(problems)))
	}
	c.checked, c.at, c.problems, c.unknown = cfg, now, len(problems), unknown
	c.set(len(problems))
}

func (c *kindChecker) set(problems int) {
	if c.gauge != nil {
		c.gauge.Set(float64(problems))
	}
}

// run checks every interval until ctx is done.
func (c *kindChecker) run(ctx context.Context, every time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) { c.check() }, every)
}

// registerKindsGauge exports how many kinds the config file names that
// kube-apiserver does not serve.
func registerKindsGauge(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kausality_proxy_config_unserved_kinds",
		Help: "Kinds the config file names (ungatedChildKinds, lifecycle, unboundStatusRecordDelays) that kube-apiserver does not serve: entries that match nothing. The log names each.",
	})
	if reg != nil {
		reg.MustRegister(g)
	}
	return g
}
