package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// longList is a comprehension over 48,000 integers put together from
// ranges within the bound: charged about 300,000, within the cost limit,
// it takes seconds in cel-go's cost tracking.
var longList = "[" + strings.TrimSuffix(strings.Repeat("lists.range(1000),", 48), ",") + "].flatten().all(i, i >= 0)"

// withEvalTime makes every evaluation in the test end after d.
func withEvalTime(t *testing.T, d time.Duration) {
	was := maxEvalTime
	maxEvalTime = d
	t.Cleanup(func() { maxEvalTime = was })
}

// An evaluation that takes longer than maxEvalTime is stopped and charged
// the whole limit, whatever cel-go counted: its cost tracking is no bound
// on time. (The bound is made a millisecond here, so that the test does
// not wait on the machine's speed.)
func TestAConditionThatRunsTooLongIsStopped(t *testing.T) {
	withEvalTime(t, time.Millisecond)
	c, p := CompileCondition(longList)
	if c == nil {
		t.Fatalf("refused at compile time: %+v", p)
	}
	ok, spent, err := c.Eval(context.Background(), map[string]any{}, nil, CostLimit)
	if ok || !errors.Is(err, ErrConditionCost) || spent != CostLimit {
		t.Fatalf("held %v, spent %d, err %v; want it stopped and charged %d", ok, spent, err, CostLimit)
	}
	if ok, _, err := (mustCondition(t, "1 < 2")).Eval(context.Background(), map[string]any{}, nil, CostLimit); !ok || err != nil {
		t.Fatalf("a quick condition: %v %v", ok, err)
	}
}

func TestARuleThatRunsTooLongIsStopped(t *testing.T) {
	withEvalTime(t, time.Millisecond)
	p := Compile(policyOf(v1alpha1.ApprovalPolicyKind, "infra", cmRule(map[string]any{"match": map[string]any{"cel": longList}})))
	if len(p.Problems) != 0 {
		t.Fatalf("problems at compile time: %+v", p.Problems)
	}
	m := NewMatcher(context.Background(), p)
	res := m.Match(Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "cm", New: configMap("", nil)})
	if res.Hit != nil || len(res.Problems) != 1 || res.Problems[0].Reason != v1alpha1.ReasonCostExceeded ||
		!strings.Contains(res.Problems[0].Message, "took longer than 1ms") {
		t.Fatalf("result %+v, want a cost problem that says it took too long", res)
	}
	if spent := RequestBudget - m.remaining; spent != CostLimit {
		t.Errorf("charged %d, want the limit %d", spent, CostLimit)
	}
}

func mustCondition(t *testing.T, expr string) *Condition {
	t.Helper()
	c, p := CompileCondition(expr)
	if c == nil {
		t.Fatalf("%s: %+v", expr, p)
	}
	return c
}
func TestAConditionThatRunsTooLongIsChargedOneLimit(t *testing.T) {
	withEvalTime(t, time.Millisecond)
	c := mustCondition(t, longList)
	_, spent, err := c.Eval(context.Background(), map[string]any{}, nil, WriteBudget)
	if !errors.Is(err, ErrConditionCost) || spent != CostLimit {
		t.Fatalf("spent %d (err %v), want it charged the limit %d of one evaluation, not the %d left of the write's budget", spent, err, CostLimit, WriteBudget)
	}
}
