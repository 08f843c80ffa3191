package policy

import (
	"context"
	"errors"
	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"testing"
)

func TestCondition(t *testing.T) {
	obj := map[string]any{"spec": map[string]any{"replicas": int64(3), "items": []any{"a", "b", "c"}}}
	old := map[string]any{"spec": map[string]any{"replicas": int64(1)}}
	tests := []struct {
		name  string
		expr  string
		old   map[string]any
		limit int64
		want  bool
		err   error
	}{
		{name: "holds", expr: "object.spec.replicas > oldObject.spec.replicas", old: old, limit: CostLimit, want: true},
		{name: "does not hold", expr: "object.spec.replicas < oldObject.spec.replicas", old: old, limit: CostLimit},
		{name: "a missing key does not hold", expr: "object.spec.missing == 1", limit: CostLimit},
		{name: "oldObject is null on create", expr: "oldObject == null", limit: CostLimit, want: true},
		{name: "stopped at the limit it is given", expr: "object.spec.replicas > 0 && object.spec.replicas < 10 && object.spec.replicas != 5 && object.spec.replicas != 6", limit: 2, err: ErrConditionCost},
		{name: "no budget left", expr: "true", limit: 0, err: ErrConditionCost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, prob := CompileCondition(tt.expr)
			if c == nil {
				t.Fatalf("compile: %v", prob)
			}
			got, spent, err := c.Eval(context.Background(), obj, tt.old, tt.limit)
			if got != tt.want || !errors.Is(err, tt.err) {
				t.Errorf("Eval = %v, %v; want %v, %v", got, err, tt.want, tt.err)
			}
			if spent < 0 || (tt.limit > 0 && spent > tt.limit) {
				t.Errorf("spent %d of a limit of %d", spent, tt.limit)
			}
		})
	}
	if c, prob := CompileCondition("object.("); c != nil || prob.Reason != v1alpha1.ReasonInvalid {
		t.Errorf("a broken expression compiled: %v", prob)
	}
}
