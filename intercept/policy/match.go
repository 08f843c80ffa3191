package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"path"
	"strconv"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
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
	// Problems are evaluations that exceeded the cost limit.
	Problems []EvalProblem
}

// Evaluate matches the write against policies. Evaluation errors other
// than the cost limit (a missing key, a type mismatch) mean the rule does
// not match: a policy only ever approves, so not matching is the safe
// side.
func Evaluate(policies []*Compiled, req Request) Result {
	var res Result
	var desired *string
	for _, p := range policies {
		if p == nil {
			continue
		}
		res.Evaluated = append(res.Evaluated, p.Ref)
		for i := range p.rules {
			r := &p.rules[i]
			ok, prob := r.matches(req, &desired)
			if prob != nil {
				res.Problems = append(res.Problems, EvalProblem{Policy: p.Ref, UID: string(p.UID), Generation: p.Generation, Problem: *prob})
			}
			if ok {
				res.Hit = &Hit{Policy: p.Ref, Rule: r.index, Mode: r.Mode, Expiry: r.Expiry}
				return res
			}
		}
	}
	return res
}

func (r *compiledRule) matches(req Request, desired **string) (bool, *Problem) {
	if r.broken || (req.NewOrigin && !r.NewOrigins) {
		return false, nil
	}
	if r.APIVersion != req.APIVersion || r.Kind != req.Kind || !glob(r.Namespace, req.Namespace) || !glob(r.Name, req.Name) {
		return false, nil
	}
	if !r.expiry.IsZero() && !req.Now.Before(r.expiry) {
		return false, nil
	}
	if r.Prereqs != nil {
		// Prereqs are about the stored object: a CREATE has none.
		if req.Old == nil {
			return false, nil
		}
		if ok, prob := r.eval(r.prereq, req.Old, req.Old, "prereqs.cel"); !ok {
			return false, prob
		}
	}
	if r.Match == nil {
		return true, nil
	}
	if req.New == nil {
		return false, nil
	}
	if r.match != nil {
		if ok, prob := r.eval(r.match, req.New, req.Old, "match.cel"); !ok {
			return false, prob
		}
	}
	if r.re != nil {
		if *desired == nil {
			s, err := DesiredJSON(req.New)
			if err != nil {
				return false, nil
			}
			*desired = &s
		}
		if !r.re.MatchString(**desired) {
			return false, nil
		}
	}
	return true, nil
}

func (r *compiledRule) eval(prog cel.Program, object, oldObject map[string]any, field string) (bool, *Problem) {
	act := map[string]any{ObjectVar: nullable(object), OldObjectVar: nullable(oldObject)}
	v, _, err := prog.Eval(act)
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
			return false, &Problem{Rule: r.index, Reason: ReasonCostExceeded,
				Message: field + ": evaluation exceeded the cost limit " + strconv.Itoa(CostLimit)}
		}
		return false, nil
	}
	return v == types.True, nil
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
	if pattern == "" || pattern == Wildcard {
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
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
			continue
		}
		out[k] = v
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}
