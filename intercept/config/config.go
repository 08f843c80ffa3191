// Package config is the --config file: which writes are intercepted
// (resource rules, excluded namespaces), how each controller is rolled out
// (shadow, log or enforce), how parents' initialization is detected per
// kind, and how long a kind's unbound status records wait. It is validated on load, errors name the line and the field, and a
// Watcher reloads it when the file changes, keeping the last good version
// when a new one is invalid.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/lifecycle"
	"github.com/kausality-io/kausality-proxy/intercept/rules"
)

// APIVersion and Kind identify the file format.
const (
	APIVersion = "kausality.io/v1alpha1"
	Kind       = "ProxyConfiguration"
)

// File is the file format.
type File struct {
	APIVersion         string         `yaml:"apiVersion"`
	Kind               string         `yaml:"kind"`
	ResourceRules      *ResourceRules `yaml:"resourceRules"`
	ExcludedNamespaces *[]string      `yaml:"excludedNamespaces"`
	Controllers        []Controller   `yaml:"controllers"`
	Lifecycle          []Lifecycle    `yaml:"lifecycle"`
	// UngatedChildKinds are child kinds that controllers replace by design
	// (a Pod a drain evicted, a CronJob's next Job), each under every
	// parent or under parents of one kind: their controller writes under a
	// settled parent are traced but not gated. Absent:
	// DefaultUngatedChildKinds. An empty list gates every kind.
	UngatedChildKinds *[]UngatedChildKind `yaml:"ungatedChildKinds"`
	// UnboundStatusRecordDelays set, per kind that reports no observed
	// generation, how long after a status write that names no
	// resourceVersion the generation it landed on is recorded; kinds not
	// listed take --unbound-status-record-delay.
	UnboundStatusRecordDelays []KindDelay `yaml:"unboundStatusRecordDelays"`
}

// KindDelay is one kind's delay.
type KindDelay struct {
	// APIGroup of the kind ("" for core).
	APIGroup string `yaml:"apiGroup"`
	Kind     string `yaml:"kind"`
	// Delay is a Go duration ("45s", "2m"); "0s" records at once.
	Delay string `yaml:"delay"`
}

// MaxUnboundStatusRecordDelay bounds a kind's delay: until its record
// lands, a parent counts as carrying out its spec, so its controller's
// writes pass as Expected. An hour is longer than any operator should
// take to act on a spec change it has been told of.
const MaxUnboundStatusRecordDelay = time.Hour

// GroupKind names a kind.
type GroupKind struct {
	// APIGroup of the kind ("" for core).
	APIGroup string `yaml:"apiGroup"`
	Kind     string `yaml:"kind"`
}

// UngatedChildKind is an ungated child kind: under every parent, or only
// under parents of the kind Parent names.
type UngatedChildKind struct {
	// APIGroup of the kind ("" for core).
	APIGroup string     `yaml:"apiGroup"`
	Kind     string     `yaml:"kind"`
	Parent   *GroupKind `yaml:"parent"`
}

// checkGroup reports an apiGroup that names a version too: it would never
// match, and the entry would do nothing without a word.
func checkGroup(group, path string, fail func(path, format string, args ...any)) {
	if g, version, ok := strings.Cut(group, "/"); ok {
		fail(path, "must be an API group without a version (%q, not %q); %s is the version", g, group, version)
	}
}

// parse validates k, the entry at path of the file root, reporting each
// problem to fail.
func (k UngatedChildKind) parse(root *yaml.Node, path string, fail func(path, format string, args ...any)) decision.UngatedKind {
	if k.Kind == "" {
		fail(path+".kind", "required")
	}
	checkGroup(k.APIGroup, path+".apiGroup", fail)
	u := decision.UngatedKind{Child: schema.GroupKind{Group: k.APIGroup, Kind: k.Kind}}
	switch {
	case k.Parent == nil && present(root, path+".parent"):
		// An empty parent decodes as none, which would ungate the kind
		// under every parent.
		fail(path+".parent", "must name the kind of the parents under which %s is ungated (apiGroup and kind), or be left out to ungate it under every parent", k.Kind)
	case k.Parent == nil:
	case k.Parent.Kind == "":
		fail(path+".parent.kind", "required: the kind of the parents under which %s is ungated (leave parent out to ungate it under every parent)", k.Kind)
	default:
		checkGroup(k.Parent.APIGroup, path+".parent.apiGroup", fail)
		u.Parent = schema.GroupKind{Group: k.Parent.APIGroup, Kind: k.Parent.Kind}
	}
	return u
}

// overlapping finds an entry of kinds that ungates what u does, or that u
// would make pointless: the same entry, or the same child kind where one
// of the two names no parent (that one ungates the kind under every
// parent, the other's parent then adds nothing). Two entries of one child
// kind under different parents are both needed.
func overlapping(kinds []decision.UngatedKind, u decision.UngatedKind) (int, bool) {
	for j, k := range kinds {
		if k.Child == u.Child && (k.Parent == u.Parent || k.Parent.Kind == "" || u.Parent.Kind == "") {
			return j, true
		}
	}
	return 0, false
}

// overlapProblem says why u cannot stand beside other, the entry at index
// j: what each one ungates, so the reader knows which one to remove.
func overlapProblem(u decision.UngatedKind, j int, other decision.UngatedKind) string {
	if u == other {
		return fmt.Sprintf("%s is listed twice (also ungatedChildKinds[%d])", u, j)
	}
	wide, narrow := other, u
	if u.Parent.Kind == "" {
		wide, narrow = u, other
	}
	return fmt.Sprintf("%s overlaps ungatedChildKinds[%d]: %s ungates %s under every parent, so the entry %s has no effect; keep one of them",
		u, j, wide, wide.Child, narrow)
}

// DefaultUngatedChildKinds are the attempts that well-known controllers
// create by design under a settled parent, on a timer or after a failure:
// Pods and Jobs, and cert-manager's CertificateRequests (a renewal) with
// the ACME Orders and Challenges that carry them out, and the Secret a
// Certificate owns (cert-manager's --enable-certificate-owner-ref), which
// each renewal rewrites. Nobody turns on enforce mode if a node drain can
// no longer bring pods back, a CronJob can no longer start its Jobs, or
// certificates silently stop renewing.
var DefaultUngatedChildKinds = []decision.UngatedKind{
	{Child: schema.GroupKind{Kind: "Pod"}},
	{Child: schema.GroupKind{Group: "batch", Kind: "Job"}},
	{Child: schema.GroupKind{Group: "cert-manager.io", Kind: "CertificateRequest"}},
	{Child: schema.GroupKind{Group: "acme.cert-manager.io", Kind: "Order"}},
	{Child: schema.GroupKind{Group: "acme.cert-manager.io", Kind: "Challenge"}},
	{Child: schema.GroupKind{Kind: "Secret"}, Parent: schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}},
}

// ResourceRules select the intercepted resources.
type ResourceRules struct {
	Include []rules.Rule `yaml:"include"`
	Exclude []rules.Rule `yaml:"exclude"`
}

// Controller selects one controller's writes and sets its mode.
type Controller struct {
	// Name labels the controller in logs, metrics and the shadow report.
	Name  string                `yaml:"name"`
	Match Match                 `yaml:"match"`
	Mode  annotations.DriftMode `yaml:"mode"`
}

// Match selects writes: by exactly one of user, serviceAccount and group,
// optionally narrowed by fieldManager. A field manager is whatever string
// the client sends, so it never selects a controller on its own: a writer
// could otherwise pick its own mode by naming another's manager.
type Match struct {
	// User is an exact user name.
	User string `yaml:"user"`
	// ServiceAccount is namespace/name.
	ServiceAccount string `yaml:"serviceAccount"`
	// Group matches any of the user's groups.
	Group string `yaml:"group"`
	// FieldManager, when set, also requires this effective field manager.
	FieldManager string `yaml:"fieldManager"`
}

// Lifecycle sets the initialization checks for one kind.
type Lifecycle struct {
	// APIGroup of the kind ("" for core).
	APIGroup string `yaml:"apiGroup"`
	Kind     string `yaml:"kind"`
	// Order of checks: Condition=<Type>, ObservedGeneration,
	// ObservedGenerationCurrent.
	Order []string `yaml:"order"`
}

// Config is a loaded, validated configuration.
type Config struct {
	Rules       rules.Rules
	Controllers []Controller
	Lifecycle   *lifecycle.Detector
	// UngatedChildKinds: see File.UngatedChildKinds.
	UngatedChildKinds []decision.UngatedKind
	// UnboundStatusRecordDelays: see File.UnboundStatusRecordDelays.
	UnboundStatusRecordDelays map[schema.GroupKind]time.Duration
	// NamedKinds are the kinds the file names, to be checked against
	// what kube-apiserver serves (UnservedKinds); none for the defaults.
	NamedKinds []NamedKind
}

// UnboundStatusRecordDelay is the delay of kind's records, and whether
// the file sets one.
func (c *Config) UnboundStatusRecordDelay(kind schema.GroupKind) (time.Duration, bool) {
	if c == nil {
		return 0, false
	}
	d, ok := c.UnboundStatusRecordDelays[kind]
	return d, ok
}

// Default is the configuration without a file.
func Default() *Config {
	return &Config{Rules: rules.Default(), Lifecycle: &lifecycle.Detector{}, UngatedChildKinds: slices.Clone(DefaultUngatedChildKinds)}
}

// ControllerFor returns the first controller setting that matches the
// write, or nil.
func (c *Config) ControllerFor(u user.Info, fieldManager string) *Controller {
	if c == nil || u == nil {
		return nil
	}
	for i := range c.Controllers {
		if c.Controllers[i].Match.matches(u, fieldManager) {
			return &c.Controllers[i]
		}
	}
	return nil
}

func (m Match) matches(u user.Info, fieldManager string) bool {
	if m.FieldManager != "" && fieldManager != m.FieldManager {
		return false
	}
	switch {
	case m.User != "":
		return u.GetName() == m.User
	case m.ServiceAccount != "":
		ns, name, _ := strings.Cut(m.ServiceAccount, "/")
		return u.GetName() == serviceaccount.MakeUsername(ns, name)
	case m.Group != "":
		for _, g := range u.GetGroups() {
			if g == m.Group {
				return true
			}
		}
		return false
	}
	return false
}

// Parse decodes and validates a configuration. Errors name the line and
// the field ("line 7: controllers[0].mode: ...").
//
//nolint:funlen // one flat pass over the fields of the file, each validated where it is read
func Parse(data []byte) (*Config, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var f File
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&f); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%s", strings.Join(te.Errors, "; "))
		}
		return nil, err
	}
	var errs []string
	fail := func(path, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("line %d: %s: %s", lineOf(&root, path), path, fmt.Sprintf(format, args...)))
	}
	if f.APIVersion != APIVersion {
		fail("apiVersion", "must be %q, not %q", APIVersion, f.APIVersion)
	}
	if f.Kind != Kind {
		fail("kind", "must be %q, not %q", Kind, f.Kind)
	}

	cfg := Default()
	named := func(path, group, kind string) {
		if kind != "" {
			cfg.NamedKinds = append(cfg.NamedKinds, NamedKind{Path: path, Line: lineOf(&root, path), Kind: schema.GroupKind{Group: group, Kind: kind}})
		}
	}
	if f.ResourceRules != nil {
		cfg.Rules.Include = slices.Clone(f.ResourceRules.Include)
		if f.ResourceRules.Include == nil {
			cfg.Rules.Include = rules.Default().Include
		}
		// Excludes from the file add to the built-in ones: reviews and
		// high-churn kinds are never worth intercepting.
		cfg.Rules.Exclude = append(cfg.Rules.Exclude, f.ResourceRules.Exclude...)
		for i, r := range f.ResourceRules.Include {
			if err := r.Validate(); err != nil {
				fail(fmt.Sprintf("resourceRules.include[%d]", i), "%v", err)
			}
		}
		for i, r := range f.ResourceRules.Exclude {
			if err := r.Validate(); err != nil {
				fail(fmt.Sprintf("resourceRules.exclude[%d]", i), "%v", err)
			}
		}
	}
	if f.ExcludedNamespaces != nil {
		cfg.Rules.ExcludedNamespaces = *f.ExcludedNamespaces
		for i, ns := range *f.ExcludedNamespaces {
			if ns == "" {
				fail(fmt.Sprintf("excludedNamespaces[%d]", i), "empty namespace name")
			}
		}
	}

	names := map[string]bool{}
	for i, c := range f.Controllers {
		path := fmt.Sprintf("controllers[%d]", i)
		if c.Name == "" {
			fail(path+".name", "required: it labels the controller in logs, metrics and the shadow report")
		} else if names[c.Name] {
			fail(path+".name", "duplicate name %q", c.Name)
		}
		names[c.Name] = true
		switch c.Mode {
		case annotations.ModeShadow, annotations.ModeLog, annotations.ModeEnforce:
		default:
			fail(path+".mode", "must be shadow, log or enforce, not %q", c.Mode)
		}
		set := 0
		for _, v := range []string{c.Match.User, c.Match.ServiceAccount, c.Match.Group} {
			if v != "" {
				set++
			}
		}
		if set != 1 {
			fail(path+".match", "set exactly one of user, serviceAccount, group (fieldManager only narrows one of them: a client chooses its field manager freely)")
		}
		if sa := c.Match.ServiceAccount; sa != "" {
			if ns, name, ok := strings.Cut(sa, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
				fail(path+".match.serviceAccount", "must be namespace/name, not %q", sa)
			}
		}
	}
	cfg.Controllers = f.Controllers

	if len(f.Lifecycle) > 0 {
		cfg.Lifecycle.ByGVK = map[schema.GroupVersionKind][]lifecycle.Check{}
	}
	for i, l := range f.Lifecycle {
		path := fmt.Sprintf("lifecycle[%d]", i)
		if l.Kind == "" {
			fail(path+".kind", "required")
		}
		if len(l.Order) == 0 {
			fail(path+".order", "must list at least one check")
		}
		checks := make([]lifecycle.Check, 0, len(l.Order))
		for j, o := range l.Order {
			c := lifecycle.Check(o)
			if err := c.Validate(); err != nil {
				fail(fmt.Sprintf("%s.order[%d]", path, j), "%v", err)
			}
			checks = append(checks, c)
		}
		checkGroup(l.APIGroup, path+".apiGroup", fail)
		named(path+".kind", l.APIGroup, l.Kind)
		gvk := schema.GroupVersionKind{Group: l.APIGroup, Kind: l.Kind}
		if _, dup := cfg.Lifecycle.ByGVK[gvk]; dup && l.Kind != "" {
			// The later entry would silently replace the earlier one.
			fail(path+".kind", "%s is listed twice", gvk.GroupKind().String())
		}
		cfg.Lifecycle.ByGVK[gvk] = checks
	}

	if f.UngatedChildKinds != nil {
		cfg.UngatedChildKinds = []decision.UngatedKind{}
		for i, k := range *f.UngatedChildKinds {
			path := fmt.Sprintf("ungatedChildKinds[%d]", i)
			u := k.parse(&root, path, fail)
			named(path+".kind", u.Child.Group, u.Child.Kind)
			named(path+".parent.kind", u.Parent.Group, u.Parent.Kind)
			if u.Child.Kind != "" {
				if j, ok := overlapping(cfg.UngatedChildKinds, u); ok {
					fail(path, "%s", overlapProblem(u, j, cfg.UngatedChildKinds[j]))
				}
			}
			cfg.UngatedChildKinds = append(cfg.UngatedChildKinds, u)
		}
	}

	for i, k := range f.UnboundStatusRecordDelays {
		path := fmt.Sprintf("unboundStatusRecordDelays[%d]", i)
		checkGroup(k.APIGroup, path+".apiGroup", fail)
		named(path+".kind", k.APIGroup, k.Kind)
		gk := schema.GroupKind{Group: k.APIGroup, Kind: k.Kind}
		if k.Kind == "" {
			fail(path+".kind", "required")
		} else if _, dup := cfg.UnboundStatusRecordDelays[gk]; dup {
			fail(path+".kind", "%s is listed twice", gk.String())
		}
		d, err := time.ParseDuration(k.Delay)
		switch {
		case k.Delay == "":
			fail(path+".delay", "required: a duration such as \"45s\" or \"2m\" (\"0s\" records at once)")
			continue
		case err != nil:
			fail(path+".delay", "must be a duration such as \"45s\" or \"2m\", not %q", k.Delay)
			continue
		case d < 0:
			fail(path+".delay", "must not be negative, not %s", k.Delay)
			continue
		case d > MaxUnboundStatusRecordDelay:
			fail(path+".delay", "must be at most %s (until the record lands, the parent's controller writes pass as carrying out its spec), not %s", MaxUnboundStatusRecordDelay, k.Delay)
			continue
		}
		if cfg.UnboundStatusRecordDelays == nil {
			cfg.UnboundStatusRecordDelays = map[schema.GroupKind]time.Duration{}
		}
		cfg.UnboundStatusRecordDelays[gk] = d
	}

	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return cfg, nil
}

// lineOf finds the line of a path like "controllers[1].mode" in the YAML
// tree; the closest existing ancestor's line when the field is missing.
func lineOf(root *yaml.Node, path string) int {
	line, _ := nodeAt(root, path)
	return line
}

// present reports whether the file spells out path, even with an empty or
// null value, which decodes as if it were left out.
func present(root *yaml.Node, path string) bool {
	_, found := nodeAt(root, path)
	return found
}

// nodeAt walks path in the YAML tree: the line of path, or of its closest
// existing ancestor, and whether path itself exists.
func nodeAt(root *yaml.Node, path string) (line int, found bool) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line = n.Line
	for _, part := range strings.Split(path, ".") {
		key, idx := part, -1
		if open := strings.Index(part, "["); open >= 0 && strings.HasSuffix(part, "]") {
			key = part[:open]
			if _, err := fmt.Sscanf(part[open+1:len(part)-1], "%d", &idx); err != nil {
				idx = -1
			}
		}
		next, keyLine := mapValue(n, key)
		if next == nil {
			return line, false
		}
		n, line = next, keyLine
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return line, false
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return line, true
}

// mapValue returns the value of key and the line of the key itself: the
// line a person looks for.
func mapValue(n *yaml.Node, key string) (*yaml.Node, int) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, 0
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1], n.Content[i].Line
		}
	}
	return nil, 0
}
