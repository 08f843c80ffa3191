package policy

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
)

// Condition is one boolean CEL expression on object and oldObject, compiled
// with the environment, the cost estimate and the regexp bounds of an
// ApprovalPolicy's rules, for other policy kinds that hold the same
// conditions.
type Condition struct {
	x *expression
}

// CompileCondition compiles expr; on failure it returns nil and the
// Problem's reason and message (Rule is left to the caller).
func CompileCondition(expr string) (*Condition, Problem) {
	x, reason, msg := compileCEL(expr)
	if x == nil {
		return nil, Problem{Rule: -1, Reason: reason, Message: msg}
	}
	return &Condition{x: x}, Problem{}
}

// maxEvalTime bounds the time of one evaluation of an expression, of a
// condition or a rule: cel-go's cost tracking takes time quadratic in a
// comprehension's length while it charges a linear cost, so a list put
// together from short ranges, charged within the limit, can run for
// seconds. A variable so that tests can make it short.
var maxEvalTime = time.Second

// ErrConditionCost is returned when an evaluation reached its cost limit.
var ErrConditionCost = errors.New("evaluation exceeded its cost limit")

// Eval evaluates the condition, spending at most limit (capped at
// CostLimit), and returns whether it holds and what it cost. An evaluation
// error other than the cost (a missing key, a type mismatch) is false:
// conditions only ever grant, so not holding is the safe side.
func (c *Condition) Eval(ctx context.Context, object, oldObject map[string]any, limit int64) (bool, int64, error) {
	if limit <= 0 {
		return false, 0, ErrConditionCost
	}
	prog, err := c.x.program(limit)
	if err != nil {
		return false, 0, nil
	}
	// cel-go's cost tracking takes time quadratic in a comprehension's
	// length while it charges a linear cost: the cost limit alone bounds
	// no evaluation's time.
	evalCtx, cancel := context.WithTimeout(ctx, maxEvalTime)
	defer cancel()
	v, details, err := prog.ContextEval(evalCtx, map[string]any{ObjectVar: nullable(object), OldObjectVar: nullable(oldObject)})
	if err != nil && ctx.Err() == nil && errors.Is(evalCtx.Err(), context.DeadlineExceeded) {
		// Took too long: as costly as the limit allows.
		return false, min(limit, int64(CostLimit)), ErrConditionCost
	}
	spent := min(limit, int64(CostLimit))
	if details != nil && details.ActualCost() != nil {
		spent = int64(min(*details.ActualCost(), uint64(math.MaxInt64)))
	}
	// CEL stops at the step that crossed the limit and counts that step;
	// the caller's budget never goes below zero.
	spent = min(spent, limit)
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) {
			if cancelled.Cause == interpreter.CostLimitExceeded {
				return false, spent, ErrConditionCost
			}
			return false, spent, err
		}
		return false, spent, nil
	}
	return v == types.True, spent, nil
}
