package allowance

import (
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

// ConditionReady is the condition the proxy writes on an AllowancePolicy.
const ConditionReady = "Ready"

// Condition reasons.
const (
	ReasonCompiled     = "Compiled"
	ReasonInvalid      = "Invalid"
	ReasonCostExceeded = v1alpha1.ReasonCostExceeded
)

// Problem is why a policy never applies, or why one evaluation of it
// did not finish.
type Problem struct {
	// Field of the spec at fault, e.g. spec.match.fields[1].
	Field   string `json:"field,omitempty"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Field == "" {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// Compiled is one generation of an AllowancePolicy, ready to evaluate. It
// is immutable. A policy with Problems never applies.
type Compiled struct {
	Name       string
	UID        types.UID
	Generation int64
	Problems   []Problem

	kind     string
	group    *string
	fields   [][]segment
	cel      []*policy.Condition
	capture  []captured
	subjects []v1alpha1.AllowanceSubject
	allow    []allowed
}

type captured struct {
	path string
	segs []segment
}

type allowed struct {
	kind      string
	group     *string
	mutations []string
}

// groupMatches reports whether an object of group is of the policy's
// group; a policy that names no group speaks of the kind in every group.
func groupMatches(want *string, group string) bool {
	return want == nil || *want == group
}

// Valid reports whether the policy compiled; an invalid one never applies.
func (c *Compiled) Valid() bool { return c != nil && len(c.Problems) == 0 }

// Kind is the kind of the parent whose changes the policy speaks of.
func (c *Compiled) Kind() string { return c.kind }

// Targets reports whether the policy is written for objects of the group
// and kind, valid or not. A kind an invalid policy targets is governed all
// the same, and the invalid policy grants nothing: a policy broken by an
// edit must not switch the check of its kind off.
func (c *Compiled) Targets(group, kind string) bool {
	return c != nil && c.kind == kind && groupMatches(c.group, group)
}

// Governs reports whether the policy speaks of changes of objects of the
// group and kind: a valid policy for the kind that names their group, or
// no group.
func (c *Compiled) Governs(group, kind string) bool {
	return c.Valid() && c.kind == kind && groupMatches(c.group, group)
}

// allows reports whether the policy lets the controller make the
// mutation (as an allowance names it) to a child of the group and kind.
func (c *Compiled) allows(group, kind, mutation string) bool {
	for _, a := range c.allow {
		if a.kind != kind || !groupMatches(a.group, group) {
			continue
		}
		for _, m := range a.mutations {
			if m == mutation {
				return true
			}
		}
	}
	return false
}

// Compile reads and checks an AllowancePolicy: every path parses, every
// CEL condition compiles within kube-apiserver's cost limit, subjects and
// mutations are of known kinds.
func Compile(u *unstructured.Unstructured) *Compiled {
	c := &Compiled{Name: u.GetName(), UID: u.GetUID(), Generation: u.GetGeneration()}
	var p v1alpha1.AllowancePolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		c.fail("", ReasonInvalid, "cannot read the policy: "+err.Error())
		return c
	}
	return CompileSpec(c.Name, c.UID, c.Generation, p.Spec)
}

// CompileSpec compiles a policy's spec.
func CompileSpec(name string, uid types.UID, generation int64, spec v1alpha1.AllowancePolicySpec) *Compiled {
	c := &Compiled{Name: name, UID: uid, Generation: generation, kind: spec.Match.Kind, group: spec.Match.Group}
	if spec.Match.Kind == "" {
		c.fail("spec.match.kind", ReasonInvalid, "the parent kind is required")
	}
	c.compileMatch(spec.Match)
	c.compileSubjects(spec.Subjects)
	c.compileAllow(spec.Allow)
	return c
}

func (c *Compiled) fail(field, reason, msg string) {
	c.Problems = append(c.Problems, Problem{Field: field, Reason: reason, Message: msg})
}

func (c *Compiled) compileMatch(m v1alpha1.AllowanceMatch) {
	if len(m.Fields) == 0 {
		c.fail("spec.match.fields", ReasonInvalid, "at least one field is required: the policy applies to changes of these fields")
	}
	for i, f := range m.Fields {
		segs, err := parsePath(f)
		if err != nil {
			c.fail(indexed("spec.match.fields", i), ReasonInvalid, err.Error())
			continue
		}
		c.fields = append(c.fields, segs)
	}
	for i, expr := range m.CEL {
		field := indexed("spec.match.cel", i)
		if strings.TrimSpace(expr) == "" {
			c.fail(field, ReasonInvalid, "empty expression")
			continue
		}
		cond, prob := policy.CompileCondition(expr)
		if cond == nil {
			c.fail(field, prob.Reason, prob.Message)
			continue
		}
		c.cel = append(c.cel, cond)
	}
	for i, f := range m.Capture {
		segs, err := parsePath(f)
		if err == nil {
			for _, s := range segs {
				if s.wildcard {
					err = fmt.Errorf("path %q: a captured field must be one value, [*] names many", f)
				}
			}
		}
		if err != nil {
			c.fail(indexed("spec.match.capture", i), ReasonInvalid, err.Error())
			continue
		}
		c.capture = append(c.capture, captured{path: f, segs: segs})
	}
}

func (c *Compiled) compileSubjects(subjects []v1alpha1.AllowanceSubject) {
	if len(subjects) == 0 {
		c.fail("spec.subjects", ReasonInvalid, "at least one subject is required")
	}
	for i, s := range subjects {
		field := indexed("spec.subjects", i)
		switch {
		case s.Name == "":
			c.fail(field, ReasonInvalid, "the name is required")
		case s.Kind == v1alpha1.SubjectServiceAccount && s.Namespace == "":
			c.fail(field, ReasonInvalid, "a ServiceAccount needs its namespace")
		case s.Kind == v1alpha1.SubjectServiceAccount:
		case s.Kind == v1alpha1.SubjectUser || s.Kind == v1alpha1.SubjectGroup:
			if s.Namespace != "" {
				c.fail(field, ReasonInvalid, "only a ServiceAccount has a namespace; a "+s.Kind+" has none")
			}
		default:
			c.fail(field, ReasonInvalid, "unknown kind "+strconv.Quote(s.Kind)+": use User, Group or ServiceAccount")
		}
	}
	c.subjects = subjects
}

func (c *Compiled) compileAllow(allow []v1alpha1.AllowedMutation) {
	if len(allow) == 0 {
		c.fail("spec.allow", ReasonInvalid, "at least one allowed mutation is required")
	}
	for i, a := range allow {
		field := indexed("spec.allow", i)
		if a.Kind == "" {
			c.fail(field+".kind", ReasonInvalid, "the child kind is required")
		}
		if a.Relation != "" && a.Relation != v1alpha1.RelationChild {
			c.fail(field+".relation", ReasonInvalid, "unknown relation "+strconv.Quote(a.Relation)+": Child is the only one")
		}
		if len(a.Mutations) == 0 {
			c.fail(field+".mutations", ReasonInvalid, "at least one mutation is required: a field path, create or delete")
		}
		for j, m := range a.Mutations {
			if m == v1alpha1.MutationCreate || m == v1alpha1.MutationDelete {
				continue
			}
			if _, err := parsePath(m); err != nil {
				c.fail(indexed(field+".mutations", j), ReasonInvalid, err.Error()+" (a mutation is a field path, create or delete)")
			}
		}
		c.allow = append(c.allow, allowed{kind: a.Kind, group: a.Group, mutations: a.Mutations})
	}
}

func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// StatusCondition is the Ready condition the proxy writes on the policy:
// True when it compiled, False with its problems (and those its
// evaluations ran into, given as extra) when it never applies.
func StatusCondition(c *Compiled, extra ...Problem) metav1.Condition {
	problems := append(append([]Problem(nil), c.Problems...), extra...)
	findings := make([]policy.Finding, len(problems))
	for i, p := range problems {
		findings[i] = policy.Finding{Reason: p.Reason, Text: p.String()}
	}
	brokenSuffix := ""
	if len(c.Problems) > 0 {
		brokenSuffix = "; the policy grants no allowances until they are fixed"
	}
	return policy.ReadyCondition(c.Generation, findings, "the policy compiled; it applies to changes of "+c.kind+" by its subjects", brokenSuffix)
}

// Subject is the authenticated caller of a write.
type Subject struct {
	User   string
	Groups []string
}

// matchesSubject reports whether s is one of the policy's subjects, and
// whether one of the entries it matches may initiate.
func (c *Compiled) matchesSubject(s Subject) (matched, mayInitiate bool) {
	for _, sub := range c.subjects {
		if subjectIs(sub, s) {
			matched = true
			mayInitiate = mayInitiate || sub.MayInitiate
		}
	}
	return matched, mayInitiate
}

func subjectIs(sub v1alpha1.AllowanceSubject, s Subject) bool {
	switch sub.Kind {
	case v1alpha1.SubjectUser:
		return s.User == sub.Name
	case v1alpha1.SubjectGroup:
		for _, g := range s.Groups {
			if g == sub.Name {
				return true
			}
		}
	case v1alpha1.SubjectServiceAccount:
		return s.User == "system:serviceaccount:"+sub.Namespace+":"+sub.Name
	}
	return false
}
