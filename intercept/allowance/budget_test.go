package allowance

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

func intList(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// costly holds, and is estimated and costs a little under the cost
// limit: 44³ iterations that never find what they look for.
var costly = intList(44) + ".all(i, " + intList(44) + ".all(j, " + intList(44) + ".exists(k, i + j + k < 0) == false))"

// TestRequestBudget: the evaluations of one request (it is decided again
// after each live read) share the request's budget, and each write gets
// at most what is left of it.
func TestRequestBudget(t *testing.T) {
	p := compileYAML(t, policyYAML("costly", `  match:
    kind: Deployment
    fields: ["spec.replicas"]
    cel: ["`+costly+`"]
  subjects:
  - {kind: Group, name: people, mayInitiate: true}
  allow:
  - {kind: ReplicaSet, mutations: ["spec.replicas"]}
`))
	if !p.Valid() {
		t.Fatalf("problems: %v", p.Problems)
	}
	change := Change{Subject: person, Group: "apps", Kind: "Deployment", Name: "web",
		Old: deployment(workload{replicas: 1}), New: deployment(workload{replicas: 3}), Generation: 2}

	b := NewBudget()
	ctx := WithBudget(context.Background(), b)
	if g := Initiate(ctx, []*Compiled{p}, change); len(g.Allowances) == 0 {
		t.Fatalf("no grant within the budget: %+v", g)
	}
	spent := policy.RequestBudget - b.remaining
	if spent <= 0 {
		t.Fatal("the evaluation cost the request nothing")
	}
	if g := Initiate(ctx, []*Compiled{p}, change); len(g.Allowances) == 0 || b.remaining != policy.RequestBudget-2*spent {
		t.Fatalf("decided again: %+v, remaining %d, want %d", g, b.remaining, policy.RequestBudget-2*spent)
	}

	b.remaining = 1000
	g := Initiate(ctx, []*Compiled{p}, change)
	if len(g.Allowances) > 0 || len(g.Problems) != 1 || g.Problems[0].Reason != v1alpha1.ReasonBudgetExceeded || b.remaining != 0 {
		t.Fatalf("with 1000 left: %+v, remaining %d; want nothing granted, the budget named, none left", g, b.remaining)
	}
	if !strings.Contains(g.Unfinished, "request") {
		t.Errorf("unfinished %q does not say the request's budget ran out", g.Unfinished)
	}

	// Without a request's budget, an evaluation has one of its own.
	if g := Initiate(context.Background(), []*Compiled{p}, change); len(g.Allowances) == 0 {
		t.Errorf("no grant with a budget of its own: %+v", g)
	}
}
