package policy

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	celast "github.com/google/cel-go/common/ast"
	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
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

// CostLimit is the cost limit of one CEL evaluation, the one
// kube-apiserver gives each ValidatingAdmissionPolicy expression: no
// expression may be estimated to cost more, and none may spend more.
const CostLimit = celconfig.PerCallLimit

// Bounds of what one policy may ask of the proxy. They are checked when it
// is compiled; a policy beyond them is Invalid, not cut short, so that it
// never approves less or more than its author reads in it.
const (
	// MaxRules per policy. Every rule of every policy of the writer may
	// be tried for one write.
	MaxRules = 64
	// MaxRegexpLength is the longest regular expression, in a rule's
	// match.regexp or a CEL pattern, in bytes.
	MaxRegexpLength = 1024
	// MaxRegexpInstructions bounds a regular expression's compiled
	// program. RE2 matches in time linear in the input times the
	// program, and a repetition like .{0,1000} is a thousand
	// instructions in a few bytes: the length alone bounds neither the
	// time nor the memory.
	MaxRegexpInstructions = 4096
	// MaxRange is the longest lists.range.
	MaxRange = 1000
)

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
	ServiceAccounts []v1alpha1.ServiceAccountRef
	// Problems found while compiling; the rules they name never match.
	Problems []Problem
	rules    []compiledRule
}

type compiledRule struct {
	v1alpha1.ApprovalRule
	index  int
	broken bool
	expiry time.Time
	prereq *expression
	match  *expression
	re     *regexp.Regexp
	// reInstructions is the size of re's program, which a match costs
	// once per byte of input.
	reInstructions int
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

// requestSizeEstimator bounds every value an expression reads by the
// largest request kube-apiserver accepts, since object and oldObject have
// no schema here: what kube-apiserver assumes of a CRD field without
// maxLength or maxItems.
type requestSizeEstimator struct{}

func (requestSizeEstimator) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: uint64(celconfig.MaxRequestSizeBytes)}
}

func (requestSizeEstimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// compileCEL compiles a boolean expression, and rejects it when its cost,
// estimated for the largest object kube-apiserver stores, exceeds the
// cost limit, as kube-apiserver rejects a CRD validation rule.
func compileCEL(expr string) (*expression, string, string) {
	e, err := celEnv()
	if err != nil {
		return nil, v1alpha1.ReasonInvalid, "CEL environment: " + err.Error()
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		return nil, v1alpha1.ReasonInvalid, "compilation failed: " + iss.Err().Error()
	}
	if !ast.OutputType().IsExactType(cel.BoolType) && !ast.OutputType().IsExactType(cel.DynType) {
		return nil, v1alpha1.ReasonInvalid, "must evaluate to bool but got " + ast.OutputType().String()
	}
	if msg := celPatternProblem(ast.NativeRep().Expr()); msg != "" {
		return nil, v1alpha1.ReasonInvalid, msg
	}
	est, err := e.EstimateCost(ast, &library.CostEstimator{SizeEstimator: requestSizeEstimator{}})
	if err != nil {
		return nil, v1alpha1.ReasonInvalid, "cost estimation failed: " + err.Error()
	}
	if est.Max > CostLimit {
		return nil, v1alpha1.ReasonCostExceeded, fmt.Sprintf("estimated cost %s exceeds the cost limit %d for an object of the largest request size (%d bytes): iterate over fewer or smaller values",
			estimate(est.Max), CostLimit, celconfig.MaxRequestSizeBytes)
	}
	prog, err := e.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency))
	if err != nil {
		return nil, v1alpha1.ReasonInvalid, "program instantiation failed: " + err.Error()
	}
	return &expression{ast: ast, prog: prog}, "", ""
}

// expression is a compiled CEL expression.
type expression struct {
	ast  *cel.Ast
	prog cel.Program
}

// program is the expression's program, stopped at limit when that is
// below the cost limit: what is left of a write's budget. Building one
// costs a little; it is done at most for the last rules of a write.
func (x *expression) program(limit int64) (cel.Program, error) {
	if limit >= CostLimit {
		return x.prog, nil
	}
	e, err := celEnv()
	if err != nil {
		return nil, err
	}
	return e.Program(x.ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency), cel.CostLimit(uint64(max(limit, 0))))
}

// estimate renders a cost estimate; the largest one is no number.
func estimate(cost uint64) string {
	if cost == math.MaxUint64 {
		return "unbounded"
	}
	return strconv.FormatUint(cost, 10)
}

// regexpFunctions are the CEL functions that compile a regular expression
// from an argument: matches, and kube's find and findAll.
var regexpFunctions = map[string]bool{"matches": true, "find": true, "findAll": true}

// celPatternProblem says why a regular expression of the CEL expression
// is not allowed. CEL costs a match by the pattern's length, not its
// program, so patterns are held to the bounds of match.regexp; and a
// pattern read from the object would be compiled on every write, so it
// must be a literal.
func celPatternProblem(root celast.Expr) string {
	var problem string
	celast.PostOrderVisit(root, celast.NewExprVisitor(func(e celast.Expr) {
		if problem == "" && e.Kind() == celast.CallKind && e.AsCall().FunctionName() == "lists.range" {
			// cel-go's cost tracker is quadratic in a comprehension's
			// length: lists.range(100000).all(i, i >= 0) costs 600k, within
			// the limit, and takes tens of seconds.
			args := e.AsCall().Args()
			n, ok := int64(-1), len(args) == 1 && args[0].Kind() == celast.LiteralKind
			if ok {
				n, ok = args[0].AsLiteral().Value().(int64)
			}
			if !ok || n > MaxRange {
				problem = fmt.Sprintf("lists.range(): the length must be an integer literal of at most %d", MaxRange)
			}
			return
		}
		if problem != "" || e.Kind() != celast.CallKind || !regexpFunctions[e.AsCall().FunctionName()] {
			return
		}
		call := e.AsCall()
		args := call.Args()
		if !call.IsMemberFunction() && len(args) > 0 {
			args = args[1:]
		}
		if len(args) == 0 {
			return
		}
		var lit string
		ok := args[0].Kind() == celast.LiteralKind
		if ok {
			lit, ok = args[0].AsLiteral().Value().(string)
		}
		if !ok {
			problem = call.FunctionName() + "(): the pattern must be a string literal"
			return
		}
		if _, msg := regexpSize(lit); msg != "" {
			problem = call.FunctionName() + "(): " + msg
		}
	}))
	return problem
}

// regexpSize is the number of instructions pattern compiles to, or why it
// is beyond the bounds of a policy's regular expressions.
func regexpSize(pattern string) (int, string) {
	if len(pattern) > MaxRegexpLength {
		return 0, fmt.Sprintf("the pattern is %d bytes long, more than %d", len(pattern), MaxRegexpLength)
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err.Error()
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err.Error()
	}
	if n := len(prog.Inst); n > MaxRegexpInstructions {
		return 0, fmt.Sprintf("the pattern compiles to %d instructions, more than %d: bound fewer repetitions", n, MaxRegexpInstructions)
	}
	return len(prog.Inst), ""
}

// Compile compiles an ApprovalPolicy or ClusterApprovalPolicy. A policy
// it cannot read compiles to one without rules, and a Problem.
func Compile(u *unstructured.Unstructured) *Compiled {
	c := &Compiled{
		Ref:        Ref{Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()},
		UID:        u.GetUID(),
		Generation: u.GetGeneration(),
	}
	var rules []v1alpha1.ApprovalRule
	var err error
	switch u.GetKind() {
	case v1alpha1.ClusterApprovalPolicyKind:
		var p v1alpha1.ClusterApprovalPolicy
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
		rules, c.ServiceAccounts = p.Spec.Rules, p.Spec.ServiceAccounts
	default:
		var p v1alpha1.ApprovalPolicy
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
		rules = p.Spec.Rules
	}
	if err != nil {
		c.Problems = append(c.Problems, Problem{Rule: -1, Reason: v1alpha1.ReasonInvalid, Message: "cannot read the policy: " + err.Error()})
		return c
	}
	if u.GetKind() != v1alpha1.ClusterApprovalPolicyKind && c.Ref.Namespace == "" {
		c.Problems = append(c.Problems, Problem{Rule: -1, Reason: v1alpha1.ReasonInvalid, Message: "an ApprovalPolicy needs a namespace"})
		return c
	}
	if len(rules) > MaxRules {
		c.Problems = append(c.Problems, Problem{Rule: -1, Reason: v1alpha1.ReasonInvalid,
			Message: fmt.Sprintf("the policy has %d rules, more than %d: none of them applies; split it or merge rules", len(rules), MaxRules)})
		return c
	}
	for i, r := range rules {
		c.rules = append(c.rules, c.compileRule(i, r))
	}
	return c
}

func (c *Compiled) compileRule(i int, r v1alpha1.ApprovalRule) compiledRule {
	cr := compiledRule{ApprovalRule: r, index: i}
	fail := func(reason, msg string) {
		cr.broken = true
		c.Problems = append(c.Problems, Problem{Rule: i, Reason: reason, Message: msg})
	}
	switch r.Mode {
	case v1alpha1.ModeAlways:
	case v1alpha1.ModeOnce, v1alpha1.ModeGeneration:
		fail(v1alpha1.ReasonUnsupportedMode, "mode "+r.Mode+" needs per-object state a policy does not have; use always, or a kausality.io/approvals annotation")
	default:
		fail(v1alpha1.ReasonInvalid, "unknown mode "+strconv.Quote(r.Mode))
	}
	for _, g := range []struct{ field, pattern string }{{"namespace", r.Namespace}, {"name", r.Name}} {
		if _, err := path.Match(g.pattern, ""); err != nil {
			fail(v1alpha1.ReasonInvalid, g.field+" "+strconv.Quote(g.pattern)+": "+err.Error())
		}
	}
	if c.Ref.Kind != v1alpha1.ClusterApprovalPolicyKind {
		// A namespaced policy is written by whoever administers its
		// namespace, who need not be able to read, let alone approve,
		// anything elsewhere.
		switch {
		case r.Namespace == "" || r.Namespace == v1alpha1.Wildcard:
			cr.Namespace = c.Ref.Namespace
		case glob(r.Namespace, c.Ref.Namespace):
			cr.Namespace = c.Ref.Namespace
		case cr.broken:
			// Already reported: a namespace that is no glob.
		default:
			fail(v1alpha1.ReasonOutsideNamespace, "namespace "+strconv.Quote(r.Namespace)+" is outside the policy's namespace "+c.Ref.Namespace+
				": an ApprovalPolicy approves writes in its own namespace only; use a ClusterApprovalPolicy for others")
		}
	}
	if r.Expiry != "" {
		t, err := time.Parse(time.RFC3339, r.Expiry)
		if err != nil {
			fail(v1alpha1.ReasonInvalid, "expiry: "+err.Error())
		}
		cr.expiry = t
	}
	if r.Prereqs != nil {
		if strings.TrimSpace(r.Prereqs.CEL) == "" {
			fail(v1alpha1.ReasonInvalid, "prereqs.cel is empty")
		} else if prog, reason, msg := compileCEL(r.Prereqs.CEL); prog == nil {
			fail(reason, "prereqs.cel: "+msg)
		} else {
			cr.prereq = prog
		}
	}
	//nolint:nestif // compiling a match nests as the rule's match does (cel, regexp)
	if r.Match != nil {
		if r.Match.CEL != "" {
			if prog, reason, msg := compileCEL(r.Match.CEL); prog == nil {
				fail(reason, "match.cel: "+msg)
			} else {
				cr.match = prog
			}
		}
		if r.Match.Regexp != "" {
			anchored := `^(?:` + r.Match.Regexp + `)$`
			if _, msg := regexpSize(r.Match.Regexp); msg != "" {
				fail(v1alpha1.ReasonInvalid, "match.regexp: "+msg)
			} else if re, err := regexp.Compile(anchored); err != nil {
				fail(v1alpha1.ReasonInvalid, "match.regexp: "+err.Error())
			} else {
				cr.re = re
				cr.reInstructions, _ = regexpSize(anchored)
			}
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
