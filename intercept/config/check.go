package config

import (
	"context"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
)

// RecheckUnserved is how long a configuration that names kinds
// kube-apiserver does not serve waits before discovery is read afresh and
// they are looked up again: a CustomResourceDefinition installed after the
// file is seen within this time.
const RecheckUnserved = time.Minute

// KindChecker warns about the kinds the config file names that
// kube-apiserver does not serve. Such an entry matches nothing, without a
// word: a misspelt or miscased kind in ungatedChildKinds leaves its
// attempts gated, which in enforce mode refuses them. The file is read
// before discovery is, so this is a warning (a log line per entry when the
// file changes, and a count), not a refusal.
type KindChecker struct {
	// Settings is the configuration in force.
	Settings func() *Config
	// Mapper is kube-apiserver's discovery.
	Mapper func() meta.RESTMapper
	// Refresh reads discovery afresh (rate-limited by its owner): the
	// mapper caches what it read, and a lookup that misses does not
	// refresh a cache that is still fresh.
	Refresh func()
	// Undiscovered are the groups whose discovery failed: their kinds are
	// unknown, not unserved.
	Undiscovered func() (map[string]bool, error)
	Now          func() time.Time
	Log          *zap.Logger
	// Count is told how many kinds are unserved after each lookup.
	Count func(unserved int)

	checked *Config
	at      time.Time
	// problems are the unserved kinds last counted; unknown, those of
	// groups whose discovery failed, which are looked up again.
	problems, unknown int
}

// Check looks the kinds of the configuration in force up when it changed,
// or when some were not served and RecheckUnserved has passed.
func (c *KindChecker) Check() {
	cfg, now := c.Settings(), c.Now()
	if cfg == c.checked && (c.problems+c.unknown == 0 || now.Sub(c.at) < RecheckUnserved) {
		return
	}
	if len(cfg.NamedKinds) == 0 {
		c.checked, c.at, c.problems, c.unknown = cfg, now, 0, 0
		c.set(0)
		return
	}
	if c.Refresh != nil {
		c.Refresh()
	}
	var undiscovered map[string]bool
	var err error
	if c.Undiscovered != nil {
		undiscovered, err = c.Undiscovered()
	}
	var found []KindProblem
	if err == nil {
		found, err = UnservedKinds(cfg.NamedKinds, c.Mapper())
	}
	if err != nil {
		// Discovery failed: nothing is known of the kinds. Asked again
		// at the next check.
		c.Log.Debug("cannot look up the kinds the config file names", zap.Error(err))
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
			c.Log.Warn("the config file names a kind kube-apiserver does not serve", zap.String("problem", p.String()))
		}
	} else if len(problems) < c.problems {
		c.Log.Info("kinds the config file names are served now", zap.Int("stillUnserved", len(problems)))
	}
	c.checked, c.at, c.problems, c.unknown = cfg, now, len(problems), unknown
	c.set(len(problems))
}

func (c *KindChecker) set(problems int) {
	if c.Count != nil {
		c.Count(problems)
	}
}

// Run checks every interval until ctx is done.
func (c *KindChecker) Run(ctx context.Context, every time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) { c.Check() }, every)
}
