package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// policyOf builds a policy of kind in namespace (cluster policies are for
// the service account infra/ctrl) with rules.
func policyOf(kind, namespace string, rules ...map[string]any) *unstructured.Unstructured {
	list := make([]any, len(rules))
	for i, r := range rules {
		list[i] = r
	}
	spec := map[string]any{"rules": list}
	meta := map[string]any{"name": "ctrl", "uid": "uid-" + kind, "generation": int64(1)}
	if kind == v1alpha1.ClusterApprovalPolicyKind {
		spec["serviceAccounts"] = []any{map[string]any{"namespace": "infra", "name": "ctrl"}}
	} else {
		meta["namespace"] = namespace
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version, "kind": kind, "metadata": meta, "spec": spec,
	}}
}

// cmRule is a rule for ConfigMaps; extra fields are merged in.
func cmRule(extra map[string]any) map[string]any {
	r := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "mode": v1alpha1.ModeAlways}
	for k, v := range extra {
		r[k] = v
	}
	return r
}

// ints is a CEL list literal of 0..n-1.
func ints(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// nearLimit is estimated, and costs, a little under the cost limit:
// 44³ iterations that never find what they look for.
var nearLimit = ints(44) + ".all(i, " + ints(44) + ".all(j, " + ints(44) + ".exists(k, i + j + k < 0) == false))"

func TestCompileBounds(t *testing.T) {
	match := func(m map[string]any) map[string]any { return cmRule(map[string]any{"match": m}) }
	many := make([]map[string]any, MaxRules+1)
	for i := range many {
		many[i] = cmRule(nil)
	}
	for _, tc := range []struct {
		name     string
		policy   *unstructured.Unstructured
		reason   string
		contains string
	}{
		{"rules at the cap", policyOf(v1alpha1.ApprovalPolicyKind, "infra", many[:MaxRules]...), "", ""},
		{"rules over the cap", policyOf(v1alpha1.ApprovalPolicyKind, "infra", many...), v1alpha1.ReasonInvalid, fmt.Sprintf("%d rules, more than %d", MaxRules+1, MaxRules)},
		{"regexp too long", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"regexp": strings.Repeat("a", MaxRegexpLength+1)})), v1alpha1.ReasonInvalid, "bytes long"},
		{"regexp program too large", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"regexp": strings.Repeat(`.{0,1000}`, 36)})), v1alpha1.ReasonInvalid, "instructions"},
		{"regexp within the bounds", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"regexp": `{"data":{"v":"[0-9a-f]{64}"}}`})), "", ""},
		{"CEL pattern from the object", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "'a'.matches(object.data.re)"})), v1alpha1.ReasonInvalid, "must be a string literal"},
		{"CEL pattern program too large", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "object.data.v.matches('" + strings.Repeat(`.{0,1000}`, 36) + "')"})), v1alpha1.ReasonInvalid, "matches(): the pattern compiles to"},
		{"CEL global matches", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "matches(object.data.v, object.data.re)"})), v1alpha1.ReasonInvalid, "must be a string literal"},
		{"CEL find with a literal", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "object.data.v.find('[0-9]+') == '1'"})), "", ""},
		{"estimate over the limit for a large object", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "object.data.all(k, object.data.all(l, k != l))"})), v1alpha1.ReasonCostExceeded, "largest request size"},
		{"CEL lists.range too long", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "lists.range(100000).all(i, i >= 0)"})), v1alpha1.ReasonInvalid, "lists.range(): the length must be an integer literal of at most 1000"},
		{"CEL lists.range of a computed length", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "lists.range(size(object.data) * 1000).all(i, i >= 0)"})), v1alpha1.ReasonInvalid, "lists.range()"},
		{"CEL lists.range within the bound", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "lists.range(1000).all(i, i >= 0)"})), "", ""},
		{"estimate near the limit", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": nearLimit})), "", ""},
		{"a field of the object", policyOf(v1alpha1.ApprovalPolicyKind, "infra", match(map[string]any{"cel": "object.data.version == oldObject.data.version + '0'"})), "", ""},
		{"namespace elsewhere", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(map[string]any{"namespace": "enf"})), v1alpha1.ReasonOutsideNamespace, `namespace "enf" is outside the policy's namespace teama`},
		{"namespace glob elsewhere", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(map[string]any{"namespace": "e*"})), v1alpha1.ReasonOutsideNamespace, "use a ClusterApprovalPolicy"},
		{"cluster policy in any namespace", policyOf(v1alpha1.ClusterApprovalPolicyKind, "", cmRule(map[string]any{"namespace": "enf"})), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compile(tc.policy)
			if tc.reason == "" {
				if len(c.Problems) != 0 {
					t.Fatalf("problems: %+v", c.Problems)
				}
				return
			}
			if len(c.Problems) != 1 || c.Problems[0].Reason != tc.reason || !strings.Contains(c.Problems[0].Message, tc.contains) {
				t.Fatalf("problems %+v, want one %s containing %q", c.Problems, tc.reason, tc.contains)
			}
		})
	}
}

func TestNamespaceScope(t *testing.T) {
	cm := func(ns string) Request {
		return Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "cm", Old: configMap("", nil), New: configMap("", nil)}
	}
	for _, tc := range []struct {
		name   string
		policy *unstructured.Unstructured
		req    Request
		match  bool
	}{
		{"namespaced, no namespace: its own", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(nil)), cm("teama"), true},
		{"namespaced, no namespace: not another", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(nil)), cm("enf"), false},
		{"namespaced, *: not another", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(map[string]any{"namespace": "*"})), cm("enf"), false},
		{"namespaced, glob of its own: not another it matches", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(map[string]any{"namespace": "team*"})), cm("teamb"), false},
		{"namespaced, glob of its own: its own", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(map[string]any{"namespace": "team*"})), cm("teama"), true},
		{"namespaced, naming another", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(map[string]any{"namespace": "enf"})), cm("enf"), false},
		{"namespaced: not a cluster-scoped object", policyOf(v1alpha1.ApprovalPolicyKind, "teama", cmRule(nil)), cm(""), false},
		{"cluster, *: any", policyOf(v1alpha1.ClusterApprovalPolicyKind, "", cmRule(map[string]any{"namespace": "*"})), cm("enf"), true},
		{"cluster, exact", policyOf(v1alpha1.ClusterApprovalPolicyKind, "", cmRule(map[string]any{"namespace": "enf"})), cm("enf"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Evaluate([]*Compiled{Compile(tc.policy)}, tc.req)
			if (res.Hit != nil) != tc.match {
				t.Fatalf("hit %+v, want a match: %v", res.Hit, tc.match)
			}
		})
	}
}

// TestWriteBudget: rules that each cost nearly the cost limit, and a cheap
// one that would match after them: the write's budget runs out first, the
// rest do not match, and the policy is named for its status.
func TestWriteBudget(t *testing.T) {
	rules := make([]map[string]any, 50)
	for i := range rules {
		rules[i] = cmRule(map[string]any{"match": map[string]any{"cel": "!(" + nearLimit + ")"}})
	}
	rules = append(rules, cmRule(nil))
	expensive := Compile(policyOf(v1alpha1.ApprovalPolicyKind, "infra", rules...))
	cheap := Compile(policyOf(v1alpha1.ClusterApprovalPolicyKind, "", cmRule(nil)))
	if len(expensive.Problems) != 0 {
		t.Fatalf("problems: %+v", expensive.Problems)
	}
	m := NewMatcher(context.Background(), expensive, cheap)
	res := m.Match(Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "cm", New: configMap("", nil)})
	if res.Hit != nil {
		t.Fatalf("matched %s after the budget ran out", res.Hit)
	}
	if len(res.Problems) != 1 || res.Problems[0].Reason != v1alpha1.ReasonBudgetExceeded || res.Problems[0].Policy != expensive.Ref {
		t.Fatalf("problems %+v, want the budget of %s", res.Problems, expensive.Ref)
	}
	if !strings.Contains(res.Unfinished, expensive.Ref.String()) || !strings.Contains(res.Unfinished, "did not approve") {
		t.Errorf("unfinished %q", res.Unfinished)
	}
	if len(res.Evaluated) != 1 {
		t.Errorf("evaluated %v: the cluster policy after the budget ran out must not be", res.Evaluated)
	}
	if m.remaining != RequestBudget-WriteBudget {
		t.Errorf("remaining request budget %d, want %d", m.remaining, RequestBudget-WriteBudget)
	}
}

// TestRequestBudget: the writes of one request are each matched within
// what is left of the request's budget.
func TestRequestBudget(t *testing.T) {
	p := Compile(policyOf(v1alpha1.ApprovalPolicyKind, "infra", cmRule(map[string]any{"match": map[string]any{"cel": nearLimit}})))
	m := NewMatcher(context.Background(), p)
	m.remaining = 1000
	res := m.Match(Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "cm", New: configMap("", nil)})
	if res.Hit != nil || len(res.Problems) != 1 || res.Problems[0].Reason != v1alpha1.ReasonBudgetExceeded || m.remaining != 0 {
		t.Fatalf("result %+v, remaining %d", res, m.remaining)
	}
	if !strings.Contains(res.Problems[0].Message, "budget (1000 of") {
		t.Errorf("message %q", res.Problems[0].Message)
	}
}

// TestMatcherMatchesOncePerWrite: a request decided again matches the same
// write from memory; new objects (a live read) are matched again, from
// what is left of the request's budget.
func TestMatcherMatchesOncePerWrite(t *testing.T) {
	p := Compile(policyOf(v1alpha1.ApprovalPolicyKind, "infra", cmRule(map[string]any{"match": map[string]any{"cel": nearLimit}})))
	m := NewMatcher(context.Background(), p)
	req := Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "cm", New: configMap("", nil)}
	first := m.Match(req)
	if first.Hit == nil {
		t.Fatalf("no match: %+v", first)
	}
	spent := RequestBudget - m.remaining
	if spent == 0 {
		t.Fatal("the evaluation cost nothing")
	}
	if again := m.Match(req); again.Hit == nil || m.remaining != RequestBudget-spent {
		t.Fatalf("matched again: %+v, remaining %d", again, m.remaining)
	}
	req.New = configMap("", nil)
	if fresh := m.Match(req); fresh.Hit == nil || m.remaining != RequestBudget-2*spent {
		t.Fatalf("new objects: %+v, remaining %d, want %d", fresh, m.remaining, RequestBudget-2*spent)
	}
}

// A deletecollection matches each of its objects in turn: the matcher
// holds the results (and objects) of the last one only, so that its
// memory does not grow with the collection; the last object's writes are
// still matched once.
func TestMatcherHoldsTheLastObjectOnly(t *testing.T) {
	p := Compile(policyOf(v1alpha1.ApprovalPolicyKind, "infra", cmRule(map[string]any{"match": map[string]any{"cel": "true"}})))
	m := NewMatcher(context.Background(), p)
	for i := range 1000 {
		req := Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: fmt.Sprintf("cm-%d", i), New: configMap("", nil)}
		if res := m.Match(req); res.Hit == nil {
			t.Fatalf("object %d: no match: %+v", i, res)
		}
		remaining := m.remaining
		if again := m.Match(req); again.Hit == nil || m.remaining != remaining {
			t.Fatalf("object %d matched again: %+v, remaining %d, want %d", i, again, m.remaining, remaining)
		}
		if len(m.results) != 1 {
			t.Fatalf("after object %d the matcher holds %d results, want the last object's one", i, len(m.results))
		}
	}
}

// TestMatchStopsWithTheRequest: a request that has ended evaluates
// nothing more, and nothing matches.
func TestMatchStopsWithTheRequest(t *testing.T) {
	p := Compile(policyOf(v1alpha1.ApprovalPolicyKind, "infra", cmRule(map[string]any{"match": map[string]any{"cel": "true"}})))
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	res := NewMatcher(ctx, p).Match(Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "cm", New: configMap("", nil)})
	if res.Hit != nil || !strings.Contains(res.Unfinished, "deadline") || len(res.Problems) != 0 {
		t.Fatalf("result %+v", res)
	}
}
