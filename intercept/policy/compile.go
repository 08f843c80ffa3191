package policy

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
)

// Variables bound in a rule's CEL: object is the stored object for
// prereqs and the new object for match; oldObject is the stored object in
// both (null on CREATE).
const (
	ObjectVar    = "object"
	OldObjectVar = "oldObject"
)

// CostLimit is the runtime cost limit of one CEL evaluation, the one
// kube-apiserver gives each ValidatingAdmissionPolicy expression.
const CostLimit = celconfig.PerCallLimit

// Ref names a policy.
type Ref struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String renders "ApprovalPolicy ns/name" or "ClusterApprovalPolicy name".
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Problem is why a rule (Rule >= 0) or the whole policy (Rule < 0) never
// matches, or why an evaluation did not.
type Problem struct {
	Rule    int    `json:"rule"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Rule < 0 {
		return p.Message
	}
	return "rule " + strconv.Itoa(p.Rule) + ": " + p.Message
}

// Compiled is one version of a policy, ready to match. It is immutable.
type Compiled struct {
	Ref        Ref
	UID        types.UID
	Generation int64
	// ServiceAccounts are the controllers a ClusterApprovalPolicy is for.
	ServiceAccounts []ServiceAccountRef
	// Problems found while compiling; the rules they name never match.
	Problems []Problem
	rules    []compiledRule
}

type compiledRule struct {
	Rule
	index  int
	broken bool
	expiry time.Time
	prereq cel.Program
	match  cel.Program
	re     *regexp.Regexp
}

var (
	envOnce sync.Once
	env     *cel.Env
	envErr  error
)

// celEnv is kube-apiserver's CEL environment for stored expressions (the
// libraries and the per-call cost limit of ValidatingAdmissionPolicy),
// with object and oldObject as dynamic values.
func celEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		base := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
		set, err := base.Extend(environment.VersionedOptions{
			IntroducedVersion: version.MajorMinor(1, 0),
			EnvOptions: []cel.EnvOption{
				cel.Variable(ObjectVar, cel.DynType),
				cel.Variable(OldObjectVar, cel.DynType),
			},
		}, environment.StrictCostOpt)
		if err != nil {
			envErr = err
			return
		}
		env, envErr = set.Env(environment.StoredExpressions)
	})
	return env, envErr
}

// Warm builds the CEL environment, which takes a while, ahead of the
// first policy.
func Warm() { _, _ = celEnv() }

// compileCEL compiles a boolean expression. Its estimated cost is checked
// only from below: object has no size bound, so the estimate's maximum
// says nothing, but an expression that costs more than the limit even at
// its cheapest can never finish.
func compileCEL(expr string) (cel.Program, string, string) {
	e, err := celEnv()
	if err != nil {
		return nil, ReasonInvalid, "CEL environment: " + err.Error()
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		return nil, ReasonInvalid, "compilation failed: " + iss.Err().Error()
	}
	if !ast.OutputType().IsExactType(cel.BoolType) && !ast.OutputType().IsExactType(cel.DynType) {
		return nil, ReasonInvalid, "must evaluate to bool but got " + ast.OutputType().String()
	}
	est, err := e.EstimateCost(ast, &library.CostEstimator{})
	if err != nil {
		return nil, ReasonInvalid, "cost estimation failed: " + err.Error()
	}
	if est.Min > CostLimit {
		return nil, ReasonCostExceeded, fmt.Sprintf("estimated cost %d exceeds the cost limit %d", est.Min, CostLimit)
	}
	prog, err := e.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency))
	if err != nil {
		return nil, ReasonInvalid, "program instantiation failed: " + err.Error()
	}
	return prog, "", ""
}

// Compile compiles an ApprovalPolicy or ClusterApprovalPolicy. A policy
// it cannot read compiles to one without rules, and a Problem.
func Compile(u *unstructured.Unstructured) *Compiled {
	c := &Compiled{
		Ref:        Ref{Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()},
		UID:        u.GetUID(),
		Generation: u.GetGeneration(),
	}
	var rules []Rule
	var err error
	switch u.GetKind() {
	case KindCluster:
		var p ClusterApprovalPolicy
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
		rules, c.ServiceAccounts = p.Spec.Rules, p.Spec.ServiceAccounts
	default:
		var p ApprovalPolicy
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
		rules = p.Spec.Rules
	}
	if err != nil {
		c.Problems = append(c.Problems, Problem{Rule: -1, Reason: ReasonInvalid, Message: "cannot read the policy: " + err.Error()})
		return c
	}
	for i, r := range rules {
		c.rules = append(c.rules, c.compileRule(i, r))
	}
	return c
}

func (c *Compiled) compileRule(i int, r Rule) compiledRule {
	cr := compiledRule{Rule: r, index: i}
	fail := func(reason, msg string) {
		cr.broken = true
		c.Problems = append(c.Problems, Problem{Rule: i, Reason: reason, Message: msg})
	}
	switch r.Mode {
	case ModeAlways:
	case ModeOnce, ModeGeneration:
		fail(ReasonUnsupportedMode, "mode "+r.Mode+" needs per-object state a policy does not have; use always, or a kausality.io/approvals annotation")
	default:
		fail(ReasonInvalid, "unknown mode "+strconv.Quote(r.Mode))
	}
	for _, g := range []struct{ field, pattern string }{{"namespace", r.Namespace}, {"name", r.Name}} {
		if _, err := path.Match(g.pattern, ""); err != nil {
			fail(ReasonInvalid, g.field+" "+strconv.Quote(g.pattern)+": "+err.Error())
		}
	}
	if r.Expiry != "" {
		t, err := time.Parse(time.RFC3339, r.Expiry)
		if err != nil {
			fail(ReasonInvalid, "expiry: "+err.Error())
		}
		cr.expiry = t
	}
	if r.Prereqs != nil {
		if strings.TrimSpace(r.Prereqs.CEL) == "" {
			fail(ReasonInvalid, "prereqs.cel is empty")
		} else if prog, reason, msg := compileCEL(r.Prereqs.CEL); prog == nil {
			fail(reason, "prereqs.cel: "+msg)
		} else {
			cr.prereq = prog
		}
	}
	if r.Match != nil {
		if r.Match.CEL != "" {
			if prog, reason, msg := compileCEL(r.Match.CEL); prog == nil {
				fail(reason, "match.cel: "+msg)
			} else {
				cr.match = prog
			}
		}
		if r.Match.Regexp != "" {
			re, err := regexp.Compile(`^(?:` + r.Match.Regexp + `)$`)
			if err != nil {
				fail(ReasonInvalid, "match.regexp: "+err.Error())
			}
			cr.re = re
		}
	}
	return cr
}

// Cache holds the compiled version of each policy: a policy is compiled
// once per generation (its spec; status writes do not bump it).
type Cache struct {
	mu sync.Mutex
	m  map[types.UID]*Compiled
}

// NewCache returns an empty Cache.
func NewCache() *Cache { return &Cache{m: map[types.UID]*Compiled{}} }

// Get returns the compiled u, compiling it if its generation is new.
func (c *Cache) Get(u *unstructured.Unstructured) *Compiled {
	c.mu.Lock()
	got, ok := c.m[u.GetUID()]
	c.mu.Unlock()
	if ok && got.Generation == u.GetGeneration() && got.Ref.Name == u.GetName() {
		return got
	}
	compiled := Compile(u)
	c.mu.Lock()
	c.m[u.GetUID()] = compiled
	c.mu.Unlock()
	return compiled
}

// Forget drops a deleted policy.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	delete(c.m, uid)
	c.mu.Unlock()
}
