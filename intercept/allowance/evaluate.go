package allowance

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

// MaxTraceHops bounds how far allowances are passed on: no chain of
// workload controllers is that deep, and a cycle of policies ends here.
const MaxTraceHops = 16

// Change is a write that changes an object's desired state: a person's
// (or CI's, or an autoscaler's) change of a parent for Initiate, or a
// controller's write of a child for Use and Propagate.
type Change struct {
	Subject Subject
	// Group and Kind of the written object; policies naming another group
	// do not apply to it.
	Group string
	Kind  string
	Name  string
	// Old is the stored object (nil on create), New the one written (nil
	// on delete).
	Old, New map[string]any
	// Generation is the one the write produces: the stored generation,
	// plus one when the desired state changes (1 on create).
	Generation int64
	// Written, when set, are the paths an update changes, read from the
	// write itself (WrittenPaths) rather than from Old and New, which then
	// hold only the object's metadata and what the write sets.
	Written []string
}

// Operation is how a child write mutates the child.
func (c Change) operation() string {
	switch {
	case c.Old == nil:
		return v1alpha1.MutationCreate
	case c.New == nil:
		return v1alpha1.MutationDelete
	}
	return ""
}

// Mutations are what a child write does, as an allowance names it:
// create, delete, or the changed paths of the desired state.
func (c Change) Mutations() []string {
	if op := c.operation(); op != "" {
		return []string{op}
	}
	return c.changed()
}

// changed are the desired-state paths the write changes.
func (c Change) changed() []string {
	if c.Written != nil {
		return c.Written
	}
	return ChangedPaths(c.Old, c.New)
}

// EvalProblem is a problem of one evaluation that the policy's status
// should report.
type EvalProblem struct {
	Policy     string
	Generation int64
	Problem
}

// Grant is what Initiate or Propagate adds to the written object's
// allowances.
type Grant struct {
	Allowances []Allowance
	// Policies that applied, by name, sorted.
	Policies []string
	Problems []EvalProblem
	// Unfinished says why not every policy was evaluated (the budget was
	// spent, the request ended); the ones not evaluated granted nothing.
	Unfinished string
}

// Initiate evaluates the policies for a change of a parent by a subject
// that is not its controller: every valid policy for the parent's kind
// whose subjects let the subject initiate, one of whose fields changed,
// and whose CEL conditions hold, grants its mutations to the parent's
// controller, with a trace that starts at the parent.
func Initiate(ctx context.Context, policies []*Compiled, ch Change) Grant {
	changed := ChangedPaths(ch.Old, ch.New)
	if len(changed) == 0 || ch.New == nil {
		return Grant{}
	}
	e := newEvaluation(ctx)
	var g Grant
	for _, p := range sortedPolicies(policies) {
		if !p.Governs(ch.Group, ch.Kind) {
			continue
		}
		if _, may := p.matchesSubject(ch.Subject); !may {
			continue
		}
		field := p.trigger(changed, nil)
		if field == "" {
			continue
		}
		ok, stop := e.conditions(p, ch, &g)
		if stop {
			break
		}
		if !ok {
			continue
		}
		hop := Hop{Kind: ch.Kind, Name: ch.Name, Generation: ch.Generation, Field: field, Attestations: p.attest(ch.New)}
		g.Policies = append(g.Policies, p.Name)
		g.Allowances = append(g.Allowances, p.grant(ch.Generation, ch.Subject.User, []Hop{hop})...)
	}
	return g
}

// trigger is the first changed path (they are sorted) that one of the
// policy's fields names, among those justified when justified is given.
func (c *Compiled) trigger(changed []string, justified map[string]Allowance) string {
	for _, path := range changed {
		if justified != nil {
			if _, ok := justified[path]; !ok {
				continue
			}
		}
		segs, err := parsePath(path)
		if err != nil {
			continue
		}
		for _, f := range c.fields {
			if overlaps(f, segs) {
				return path
			}
		}
	}
	return ""
}

// attest reads the captured fields of obj; a field obj lacks is left out.
func (c *Compiled) attest(obj map[string]any) map[string]string {
	var out map[string]string
	for _, cp := range c.capture {
		if v, ok := lookup(obj, cp.segs); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[cp.path] = v
		}
	}
	return out
}

// grant is the policy's allowances for one carrier generation.
func (c *Compiled) grant(generation int64, initiator string, trace []Hop) []Allowance {
	var out []Allowance
	for _, a := range c.allow {
		for _, m := range a.mutations {
			out = append(out, Allowance{Kind: a.kind, Mutation: m, Generation: generation, Initiator: initiator, Policy: c.Name,
				Trace: append([]Hop(nil), trace...)})
		}
	}
	return out
}

// Budget is what the allowance policies' CEL may cost in one request,
// across every write the request decides: a request is decided again
// after each live read, and a deletecollection decides each of its
// objects. It is the approval policies' request budget, held apart from
// theirs as kube-apiserver holds each admission policy's apart. Not safe
// for concurrent use.
type Budget struct {
	remaining int64
}

// NewBudget is the budget of one request.
func NewBudget() *Budget { return &Budget{remaining: policy.RequestBudget} }

type budgetKey struct{}

// WithBudget returns ctx carrying b: the evaluations made under it share
// it. Without one, every evaluation has a request's budget of its own.
func WithBudget(ctx context.Context, b *Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// evaluation spends one write's CEL budget across policies, drawn from
// the request's.
type evaluation struct {
	ctx       context.Context
	request   *Budget
	remaining int64
}

func newEvaluation(ctx context.Context) *evaluation {
	request, _ := ctx.Value(budgetKey{}).(*Budget)
	if request == nil {
		request = NewBudget()
	}
	return &evaluation{ctx: ctx, request: request, remaining: min(policy.WriteBudget, request.remaining)}
}

// spend charges cost to the write and to the request.
func (e *evaluation) spend(cost int64) {
	e.remaining -= cost
	e.request.remaining = max(e.request.remaining-cost, 0)
}

// conditions evaluates the policy's CEL on the change; stop is true when
// no further policy may be evaluated.
func (e *evaluation) conditions(p *Compiled, ch Change, g *Grant) (ok, stop bool) {
	for i, cond := range p.cel {
		if err := e.ctx.Err(); err != nil {
			g.Unfinished = "allowance policies not fully evaluated at " + p.Name + ": " + err.Error()
			return false, true
		}
		limited := e.remaining < policy.CostLimit
		holds, spent, err := cond.Eval(e.ctx, ch.New, ch.Old, e.remaining)
		e.spend(spent)
		switch {
		case errors.Is(err, policy.ErrConditionCost) && limited:
			g.Unfinished = "allowance policies not fully evaluated: the write (or the request it is part of) spent its CEL budget at " + p.Name +
				"; it and the policies after it granted nothing"
			g.Problems = append(g.Problems, EvalProblem{Policy: p.Name, Generation: p.Generation,
				Problem: Problem{Field: indexed("spec.match.cel", i), Reason: v1alpha1.ReasonBudgetExceeded, Message: g.Unfinished}})
			return false, true
		case errors.Is(err, policy.ErrConditionCost):
			g.Problems = append(g.Problems, EvalProblem{Policy: p.Name, Generation: p.Generation,
				Problem: Problem{Field: indexed("spec.match.cel", i), Reason: ReasonCostExceeded, Message: "evaluation exceeded the cost limit"}})
			return false, false
		case err != nil:
			g.Unfinished = "allowance policies not fully evaluated at " + p.Name + ": " + err.Error()
			return false, true
		case !holds:
			return false, false
		}
	}
	return true, false
}

func sortedPolicies(policies []*Compiled) []*Compiled {
	out := make([]*Compiled, 0, len(policies))
	for _, p := range policies {
		if p != nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Parent is what Use needs of the parent of a written child.
type Parent struct {
	Group, Kind, Name string
	Allowances        []Allowance
	// SettledGeneration is the latest generation at which the parent is
	// known to have settled (0: never); allowances of that generation or
	// earlier are consumed.
	SettledGeneration int64
}

// Consumed reports whether the allowance is used up: its carrier has
// settled at or after the generation that created it, so the change it
// was for has been carried out.
func Consumed(a Allowance, settledGeneration int64) bool {
	return settledGeneration >= a.Generation
}

// Prune returns the set without the consumed allowances, and those.
// Unknown entries are kept.
func Prune(s Set, settledGeneration int64) (kept Set, pruned []Allowance) {
	kept.Unknown = s.Unknown
	for _, a := range s.Allowances {
		if Consumed(a, settledGeneration) {
			pruned = append(pruned, a)
		} else {
			kept.Allowances = append(kept.Allowances, a)
		}
	}
	return kept, pruned
}

// Justification is the allowance chosen for one mutation of a write.
type Justification struct {
	Mutation string    `json:"mutation"`
	By       Allowance `json:"by"`
}

// Violation is a mutation no usable allowance on the parent covers, and
// the allowance it would need.
type Violation struct {
	Mutation string `json:"mutation"`
	// Needed is the allowance the parent would have to carry: the child
	// kind and the mutation.
	NeededKind     string `json:"neededKind"`
	NeededMutation string `json:"neededMutation"`
	// Message says it for a person: which field, on which parent, what is
	// missing and how such an allowance comes about.
	Message string `json:"message"`
}

// Verdict of Use.
type Verdict struct {
	// Mutations the write makes: create, delete, or changed paths.
	Mutations     []string
	Justification []Justification
	Violations    []Violation
}

// Allowed reports whether every mutation is justified.
func (v Verdict) Allowed() bool { return len(v.Violations) == 0 }

// Use decides a controller's write of a child against its parent's
// allowances: each mutation (the create, the delete, or every changed
// path of the child's desired state) must be covered by an unconsumed
// allowance for the child's kind whose policy is valid and names the
// writer among its subjects. Where several cover a mutation, the first by
// {kind}/{name}/{field} of their traces is chosen.
func Use(policies []*Compiled, parent Parent, w Change) Verdict {
	byName := map[string]*Compiled{}
	for _, p := range policies {
		if p != nil {
			byName[p.Name] = p
		}
	}
	var candidates []Allowance
	for _, a := range parent.Allowances {
		if a.Kind != w.Kind || Consumed(a, parent.SettledGeneration) {
			continue
		}
		// The policy that granted the allowance must still speak of this
		// parent and this child: a kind named alike in another group is
		// not the one the policy means.
		p := byName[a.Policy]
		if !p.Governs(parent.Group, parent.Kind) || !p.allows(w.Group, w.Kind, a.Mutation) {
			continue
		}
		if matched, _ := p.matchesSubject(w.Subject); !matched {
			continue
		}
		candidates = append(candidates, a)
	}
	sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].key() < candidates[j].key() })

	v := Verdict{Mutations: w.Mutations()}
	for _, m := range v.Mutations {
		if a, ok := justify(candidates, m); ok {
			v.Justification = append(v.Justification, Justification{Mutation: m, By: a})
			continue
		}
		v.Violations = append(v.Violations, violation(parent, w, m))
	}
	return v
}

// justify finds the first candidate that covers the mutation.
func justify(candidates []Allowance, mutation string) (Allowance, bool) {
	op := mutation == v1alpha1.MutationCreate || mutation == v1alpha1.MutationDelete
	var segs []segment
	if !op {
		var err error
		if segs, err = parsePath(mutation); err != nil {
			return Allowance{}, false
		}
	}
	for _, a := range candidates {
		if op {
			if a.Mutation == mutation {
				return a, true
			}
			continue
		}
		if a.Mutation == v1alpha1.MutationCreate || a.Mutation == v1alpha1.MutationDelete {
			continue
		}
		if pattern, err := parsePath(a.Mutation); err == nil && covers(pattern, segs) {
			return a, true
		}
	}
	return Allowance{}, false
}

func violation(parent Parent, w Change, mutation string) Violation {
	what := "changes " + mutation + " of"
	switch mutation {
	case v1alpha1.MutationCreate:
		what = "creates"
	case v1alpha1.MutationDelete:
		what = "deletes"
	}
	var b strings.Builder
	b.WriteString(w.Subject.User + " " + what + " " + w.Kind + " " + w.Name + ", and no unconsumed allowance on " +
		parent.Kind + " " + parent.Name + " allows it: it needs an allowance {kind: " + w.Kind + ", mutation: " + mutation +
		"} in " + Annotation + ", which a change of " + parent.Kind + " " + parent.Name +
		" grants when an AllowancePolicy for " + parent.Kind + " lets its author initiate it and names " + w.Subject.User + " among its subjects")
	return Violation{Mutation: mutation, NeededKind: w.Kind, NeededMutation: mutation, Message: b.String()}
}

// Propagate is what a controller's child write passes on: every valid
// policy for the child's kind that names the writer among its subjects,
// one of whose fields the write changed under a justified mutation, and
// whose CEL holds, grants its mutations to the child's controller. Their
// trace is the justifying allowance's, extended by the child. Nothing is
// passed on without a justification: a controller never starts a chain.
func Propagate(ctx context.Context, policies []*Compiled, v Verdict, w Change) Grant {
	if w.New == nil || len(v.Justification) == 0 {
		return Grant{}
	}
	changed := w.changed()
	justified := map[string]Allowance{}
	for _, j := range v.Justification {
		if j.Mutation == v1alpha1.MutationCreate {
			// Creating the child justifies every field it is created with.
			for _, path := range changed {
				justified[path] = j.By
			}
			continue
		}
		justified[j.Mutation] = j.By
	}
	e := newEvaluation(ctx)
	var g Grant
	for _, p := range sortedPolicies(policies) {
		if !p.Governs(w.Group, w.Kind) {
			continue
		}
		if matched, _ := p.matchesSubject(w.Subject); !matched {
			continue
		}
		field := p.trigger(changed, justified)
		if field == "" {
			continue
		}
		by := justified[field]
		if len(by.Trace) >= MaxTraceHops {
			continue
		}
		ok, stop := e.conditions(p, w, &g)
		if stop {
			break
		}
		if !ok {
			continue
		}
		trace := append(append([]Hop(nil), by.Trace...), Hop{Kind: w.Kind, Name: w.Name, Generation: w.Generation, Field: field, Attestations: p.attest(w.New)})
		g.Policies = append(g.Policies, p.Name)
		g.Allowances = append(g.Allowances, p.grant(w.Generation, by.Initiator, trace)...)
	}
	return g
}

// Duty is a parent whose controller writes a child not because of a
// change of the parent but as its standing duty, which the drift decision
// has already told apart: re-creating an attempt (a Pod, a Job) under a
// settled parent, or pruning revision history beyond its limit.
type Duty struct {
	Group, Kind, Name string
	Generation        int64
	// Initiator of the parent's current desired state, as far as it is
	// known (the origin of its trace); it becomes the initiator of what
	// the write passes on.
	Initiator string
}

// Standing decides a controller's write that carries out a standing duty
// of its parent. No allowance on the parent is needed, but a valid policy
// for the parent's kind that names the writer must allow the mutation:
// a settled ReplicaSet's controller may re-create Pods, not change them.
// The justifications start a trace at the parent, at the policy's first
// field, so that Propagate passes allowances on as for any justified write.
func Standing(policies []*Compiled, parent Duty, w Change) Verdict {
	v := Verdict{Mutations: w.Mutations()}
	sorted := sortedPolicies(policies)
	for _, m := range v.Mutations {
		var found *Allowance
		for _, p := range sorted {
			if !p.Governs(parent.Group, parent.Kind) || len(p.fields) == 0 {
				continue
			}
			if matched, _ := p.matchesSubject(w.Subject); !matched {
				continue
			}
			hop := Hop{Kind: parent.Kind, Name: parent.Name, Generation: parent.Generation, Field: render(p.fields[0])}
			var ofKind []Allowance
			for _, a := range p.grant(parent.Generation, parent.Initiator, []Hop{hop}) {
				if a.Kind == w.Kind && p.allows(w.Group, w.Kind, a.Mutation) {
					ofKind = append(ofKind, a)
				}
			}
			if a, ok := justify(ofKind, m); ok {
				found = &a
				break
			}
		}
		if found == nil {
			v.Violations = append(v.Violations, violation(Parent{Kind: parent.Kind, Name: parent.Name}, w, m))
			continue
		}
		v.Justification = append(v.Justification, Justification{Mutation: m, By: *found})
	}
	return v
}

// PropagationReadsContent reports whether what a write of an object of
// group and kind by subject passes on may depend on more of the object
// than its metadata and the paths the write changes: a valid policy for
// the kind that names the subject has CEL conditions (they may read the
// spec) or captures a field outside metadata.
func PropagationReadsContent(policies []*Compiled, group, kind string, subject Subject) bool {
	for _, p := range policies {
		if !p.Governs(group, kind) {
			continue
		}
		if matched, _ := p.matchesSubject(subject); !matched {
			continue
		}
		if len(p.cel) > 0 {
			return true
		}
		for _, c := range p.capture {
			if len(c.segs) == 0 || c.segs[0].key != "metadata" {
				return true
			}
		}
	}
	return false
}
