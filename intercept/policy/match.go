package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"reflect"
	"strconv"
	"time"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// Request is the write a policy is asked about.
type Request struct {
	APIVersion, Kind, Namespace, Name string
	// Old is the stored object (nil on CREATE), New the new one (nil on
	// DELETE).
	Old, New map[string]any
	// Now is the decision's clock (expiry).
	Now time.Time
	// NewOrigin: the writer is not the parent's controller; only rules
	// with newOrigins match.
	NewOrigin bool
}

// Hit is the policy and rule that matched.
type Hit struct {
	Policy Ref    `json:"policy"`
	Rule   int    `json:"rule"`
	Mode   string `json:"mode"`
	Expiry string `json:"expiry,omitempty"`
}

// String renders "ApprovalPolicy ns/name rule 0".
func (h Hit) String() string { return h.Policy.String() + " rule " + strconv.Itoa(h.Rule) }

// EvalProblem is a problem of one evaluation the policy's status should
// report: the cost limit was exceeded.
type EvalProblem struct {
	Policy     Ref
	UID        string
	Generation int64
	Problem
}

// Result of matching a write against the applicable policies.
type Result struct {
	// Hit is the first rule that matched, in the order of the policies
	// given and of their rules; nil when none did.
	Hit *Hit
	// Evaluated names the policies that were tried.
	Evaluated []Ref
	// Problems are evaluations that exceeded the cost limit or the
	// write's budget, for the policies' status.
	Problems []EvalProblem
	// Unfinished says why not every rule was tried (the budget ran out,
	// the request ended); "" when every rule was. The rules not tried did
	// not match.
	Unfinished string
}

// Budgets, in CEL cost units; a regexp is charged by regexpCost. The
// estimate bounds each expression by CostLimit, and these bound their
// number.
const (
	// WriteBudget is what matching one write against all the rules of
	// all the writer's policies may cost: kube-apiserver's budget for the
	// match conditions of one admission request, which is what the rules
	// are.
	WriteBudget = celconfig.RuntimeCELCostBudgetMatchConditions
	// RequestBudget is what one request may spend in all: kube-apiserver's
	// runtime budget for one ValidatingAdmissionPolicy per request. A write
	// decided on the proxy's computation is matched again on what a live
	// read and a dry run say kube-apiserver would store, and a
	// deletecollection matches each of its objects.
	RequestBudget = celconfig.RuntimeCELCostBudget
)

// Matcher matches the writes of one request against the writer's
// policies, under the request's context, each within WriteBudget and all
// within RequestBudget. A request is decided several times (once more
// after each live read); the same write, the same objects under the same
// parent, is matched once and its result reused. Not safe for concurrent
// use.
type Matcher struct {
	ctx       context.Context
	policies  []*Compiled
	remaining int64 // of RequestBudget
	// results are of one object's writes, the last matched: a
	// deletecollection matches each of its objects in turn and never
	// goes back to one, so holding the results (and objects) of all of
	// them would grow with the collection.
	results map[matchKey]matched
	object  objectKey
}

// objectKey is the object a write is of.
type objectKey struct{ apiVersion, kind, namespace, name string }

// matched is a Result, with the objects it was found for: holding them
// keeps their addresses, which key it, from being reused for others.
type matched struct {
	old, new map[string]any
	result   Result
}

// matchKey is a write as far as the rules can tell it apart: objects are
// told apart by identity, a live read or a dry run gives new ones.
type matchKey struct {
	apiVersion, kind, namespace, name string
	newOrigin                         bool
	old, new                          uintptr
}

// NewMatcher returns the Matcher of one request.
func NewMatcher(ctx context.Context, policies ...*Compiled) *Matcher {
	return &Matcher{ctx: ctx, policies: policies, remaining: RequestBudget, results: map[matchKey]matched{}}
}

// Evaluate matches one write against policies, with a budget of its own.
func Evaluate(policies []*Compiled, req Request) Result {
	return NewMatcher(context.Background(), policies...).Match(req)
}

// Match matches the write against the policies. Evaluation errors other
// than the cost limit (a missing key, a type mismatch) mean the rule does
// not match: a policy only ever approves, so not matching is the safe
// side. A nil Matcher has no policies.
func (m *Matcher) Match(req Request) Result {
	if m == nil || len(m.policies) == 0 {
		return Result{}
	}
	key := matchKey{apiVersion: req.APIVersion, kind: req.Kind, namespace: req.Namespace, name: req.Name, newOrigin: req.NewOrigin,
		old: reflect.ValueOf(req.Old).Pointer(), new: reflect.ValueOf(req.New).Pointer()}
	if got, ok := m.results[key]; ok {
		return got.result
	}
	if object := (objectKey{req.APIVersion, req.Kind, req.Namespace, req.Name}); object != m.object {
		clear(m.results)
		m.object = object
	}
	res := m.match(req)
	m.results[key] = matched{old: req.Old, new: req.New, result: res}
	return res
}

// errBudget stops an evaluation that has spent its budget.
var errBudget = errors.New("budget exceeded")

func (m *Matcher) match(req Request) Result {
	var res Result
	budget := min(WriteBudget, m.remaining)
	e := &evaluation{m: m, req: req, remaining: budget}
	defer func() { m.remaining -= budget - e.remaining }()
	for _, p := range m.policies {
		if p == nil {
			continue
		}
		res.Evaluated = append(res.Evaluated, p.Ref)
		for i := range p.rules {
			r := &p.rules[i]
			ok, prob, err := e.matches(r)
			if prob != nil {
				res.Problems = append(res.Problems, EvalProblem{Policy: p.Ref, UID: string(p.UID), Generation: p.Generation, Problem: *prob})
			}
			switch {
			case errors.Is(err, errBudget):
				msg := fmt.Sprintf("the write spent its policy evaluation budget (%d of %d per write, %d per request) at rule %d: the rules of the writer's policies cost too much together; rule %d and the rules after it were not tried",
					budget, WriteBudget, RequestBudget, r.index, r.index)
				res.Problems = append(res.Problems, EvalProblem{Policy: p.Ref, UID: string(p.UID), Generation: p.Generation,
					Problem: Problem{Rule: -1, Reason: v1alpha1.ReasonBudgetExceeded, Message: msg}})
				res.Unfinished = "approval policies not fully evaluated: " + p.Ref.String() + ": " + msg + ", and did not approve"
				return res
			case err != nil:
				res.Unfinished = "approval policies not fully evaluated at " + p.Ref.String() + " rule " + strconv.Itoa(r.index) + ": " + err.Error()
				return res
			case ok:
				res.Hit = &Hit{Policy: p.Ref, Rule: r.index, Mode: r.Mode, Expiry: r.Expiry}
				return res
			}
		}
	}
	return res
}

// evaluation is one Match: the write, and its desired state once a
// regexp needs it.
type evaluation struct {
	m         *Matcher
	req       Request
	desired   *string
	remaining int64
}

// matches tries one rule. A Problem is the rule's; an error stops the
// evaluation of every rule: the budget is spent or the request is over.
func (e *evaluation) matches(r *compiledRule) (bool, *Problem, error) {
	req := e.req
	if r.broken || (req.NewOrigin && !r.NewOrigins) {
		return false, nil, nil
	}
	if r.APIVersion != req.APIVersion || r.Kind != req.Kind || !glob(r.Namespace, req.Namespace) || !glob(r.Name, req.Name) {
		return false, nil, nil
	}
	if !r.expiry.IsZero() && !req.Now.Before(r.expiry) {
		return false, nil, nil
	}
	if err := e.m.ctx.Err(); err != nil {
		return false, nil, err
	}
	if r.Prereqs != nil {
		// Prereqs are about the stored object: a CREATE has none.
		if req.Old == nil {
			return false, nil, nil
		}
		if ok, prob, err := e.eval(r, r.prereq, req.Old, req.Old, "prereqs.cel"); !ok {
			return false, prob, err
		}
	}
	if r.Match == nil {
		return true, nil, nil
	}
	if req.New == nil {
		return false, nil, nil
	}
	if r.match != nil {
		if ok, prob, err := e.eval(r, r.match, req.New, req.Old, "match.cel"); !ok {
			return false, prob, err
		}
	}
	//nolint:nestif // the regexp's budget check and its match are one charged step
	if r.re != nil {
		if e.desired == nil {
			s, err := DesiredJSON(req.New)
			if err != nil {
				return false, nil, nil
			}
			e.desired = &s
		}
		cost := regexpCost(len(*e.desired), r.reInstructions)
		if cost > CostLimit {
			return false, &Problem{Rule: r.index, Reason: v1alpha1.ReasonCostExceeded,
				Message: fmt.Sprintf("match.regexp: matching %d bytes of desired state would cost %d, more than the cost limit %d", len(*e.desired), cost, CostLimit)}, nil
		}
		if err := e.spend(cost); err != nil {
			return false, nil, err
		}
		if !r.re.MatchString(*e.desired) {
			return false, nil, nil
		}
	}
	return true, nil, nil
}

// regexpCost is what matching a program of instructions against n bytes
// costs, in CEL's units: RE2 may step through every instruction for each
// byte, and CEL charges a tenth of a unit per byte it traverses.
func regexpCost(n, instructions int) int64 {
	return int64(math.Ceil(float64(n+1) * float64(instructions) * common.StringTraversalCostFactor))
}

// spend takes cost from the budget, or reports that it is spent.
func (e *evaluation) spend(cost int64) error {
	if e.remaining < cost {
		e.remaining = 0
		return errBudget
	}
	e.remaining -= cost
	return nil
}

func (e *evaluation) eval(r *compiledRule, x *expression, object, oldObject map[string]any, field string) (bool, *Problem, error) {
	if e.remaining <= 0 {
		return false, nil, errBudget
	}
	// Below the cost limit, what is left of the budget is the limit: a
	// write never spends more than its budget.
	limited := e.remaining < CostLimit
	prog, err := x.program(e.remaining)
	if err != nil {
		return false, nil, nil
	}
	act := map[string]any{ObjectVar: nullable(object), OldObjectVar: nullable(oldObject)}
	evalCtx, cancel := context.WithTimeout(e.m.ctx, maxEvalTime)
	v, details, err := prog.ContextEval(evalCtx, act)
	timedOut := err != nil && e.m.ctx.Err() == nil && errors.Is(evalCtx.Err(), context.DeadlineExceeded)
	cancel()
	spent := int64(CostLimit)
	if details != nil && details.ActualCost() != nil && !timedOut {
		spent = int64(min(*details.ActualCost(), uint64(math.MaxInt64)))
	}
	if spendErr := e.spend(spent); spendErr != nil {
		return false, nil, spendErr
	}
	if timedOut {
		// Charged as costly as the limit allows (maxEvalTime).
		return false, &Problem{Rule: r.index, Reason: v1alpha1.ReasonCostExceeded,
			Message: field + ": evaluation took longer than " + maxEvalTime.String() + "; make its lists shorter"}, nil
	}
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) {
			switch {
			case cancelled.Cause == interpreter.CostLimitExceeded && limited:
				e.remaining = 0
				return false, nil, errBudget
			case cancelled.Cause == interpreter.CostLimitExceeded:
				return false, &Problem{Rule: r.index, Reason: v1alpha1.ReasonCostExceeded,
					Message: field + ": evaluation exceeded the cost limit " + strconv.Itoa(CostLimit)}, nil
			}
			return false, nil, fmt.Errorf("%s: %w", field, err)
		}
		return false, nil, nil
	}
	return v == types.True, nil, nil
}

// nullable keeps a missing object null in CEL, not an empty map.
func nullable(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

// glob matches value against a rule's namespace or name pattern.
func glob(pattern, value string) bool {
	if pattern == "" || pattern == v1alpha1.Wildcard {
		return true
	}
	ok, err := path.Match(pattern, value)
	return err == nil && ok
}

// DesiredJSON is what a rule's regexp is matched against: the object's
// desired state, everything outside apiVersion, kind, metadata and status,
// as compact JSON with keys sorted at every level and no HTML escaping,
// e.g. {"data":{"version":"2"}} for a ConfigMap or {"spec":{"value":"x"}}.
func DesiredJSON(obj map[string]any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(desired.Fields(obj)); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}
