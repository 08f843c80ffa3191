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

// RecheckServed is how long a configuration whose kinds were all served
// waits before they are looked up again: a CustomResourceDefinition
// removed later leaves its entries matching nothing, as a typo would.
// Longer than RecheckUnserved, since each recheck reads discovery afresh.
const RecheckServed = 10 * time.Minute

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
	// warned are the unserved kinds of the file last checked, as warned
	// about; unknown counts those of groups whose discovery failed, which
	// are looked up again.
	warned  map[string]bool
	unknown int
}

// Check looks the kinds of the configuration in force up when it changed,
// when some were not served and RecheckUnserved has passed, and otherwise
// every RecheckServed.
func (c *KindChecker) Check() {
	cfg, now := c.Settings(), c.Now()
	if cfg == c.checked && now.Sub(c.at) < c.recheckAfter() {
		return
	}
	if len(cfg.NamedKinds) == 0 {
		c.checked, c.at, c.warned, c.unknown = cfg, now, nil, 0
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
		c.warned = nil
	}
	// Each kind is warned about once per file, when it is first found
	// unserved: at once for a new file, later for a kind that stopped
	// being served.
	warned := make(map[string]bool, len(problems))
	for _, p := range problems {
		text := p.String()
		if !c.warned[text] {
			c.Log.Warn("the config file names a kind kube-apiserver does not serve", zap.String("problem", text))
		}
		warned[text] = true
	}
	for text := range c.warned {
		if !warned[text] {
			c.Log.Info("kinds the config file names are served now", zap.Int("stillUnserved", len(problems)))
			break
		}
	}
	c.checked, c.at, c.warned, c.unknown = cfg, now, warned, unknown
	c.set(len(problems))
}

func (c *KindChecker) recheckAfter() time.Duration {
	if len(c.warned)+c.unknown > 0 {
		return RecheckUnserved
	}
	return RecheckServed
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
