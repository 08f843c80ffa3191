package kubectlplugin

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// AllowanceExplanation says how the allowance check decides a write of the
// child by its controller: the mode, what the parent's allowances let the
// controller change, what nothing covers, and the policies that name it.
type AllowanceExplanation struct {
	// Mode is the parent's: the check of a child's write is decided in the
	// mode of the parent whose allowances it uses.
	Mode AllowanceModeView `json:"mode"`
	// Check says which check the controller's write gets now, or why none.
	Check string `json:"check"`
	// Settled is the parent's settledness, which consumes its allowances.
	Settled *SettledView `json:"settled,omitempty"`
	// Allowances are the parent's allowances for the child's kind.
	Allowances []AllowanceUse `json:"allowances,omitempty"`
	// Covered are the mutations of the child the controller may make now.
	Covered []string `json:"covered"`
	// Uncovered says what nothing covers and what that does.
	Uncovered string `json:"uncovered,omitempty"`
	// Policies are the AllowancePolicies for the parent's kind (what the
	// write may do) and the child's (what it passes on) that name the
	// controller among their subjects, invalid ones included.
	Policies  []AllowancePolicyView `json:"policies,omitempty"`
	Errors    []string              `json:"errors,omitempty"`
	childKind string
}

// AllowanceUse is one of the parent's allowances for the child's kind and
// whether the controller can use it.
type AllowanceUse struct {
	AllowanceView
	Usable bool   `json:"usable"`
	Note   string `json:"note"`
}

// AllowancePolicyView is an AllowancePolicy that names the controller.
type AllowancePolicyView struct {
	Name string `json:"name"`
	// Kind is the parent kind the policy speaks of; Fields its fields.
	Kind        string   `json:"kind"`
	Fields      []string `json:"fields,omitempty"`
	MayInitiate bool     `json:"mayInitiate"`
	// Allows are its mutations of children of the child's kind.
	Allows []string `json:"allows,omitempty"`
	// PassesOn are, for a policy of the child's kind, the allowances a
	// justified write of the child grants on it, by grandchild kind.
	PassesOn []string            `json:"passesOn,omitempty"`
	Problems []allowance.Problem `json:"problems,omitempty"`
}

// subjectOf is the controller as the proxy authenticates it: a service
// account's user carries its groups, which policies may name.
func subjectOf(name string) allowance.Subject {
	s := allowance.Subject{User: name}
	if ns, _, err := serviceaccount.SplitUsername(name); err == nil {
		s.Groups = append(serviceaccount.MakeGroupNames(ns), user.AllAuthenticated)
	} else if name != "" {
		s.Groups = []string{user.AllAuthenticated}
	}
	return s
}

// explainAllowances explains the allowance check of a desired-state write
// of the child by controller, whose drift verdict is d.
//
//nolint:funlen // one explanation, in the order the user reads it
func explainAllowances(f Facts, controller string, d decision.Decision) *AllowanceExplanation {
	parent, child := f.Parent, f.Child
	ex := &AllowanceExplanation{Covered: []string{}, childKind: child.GetKind()}
	// Read as the proxy reads them for the controller: a mode it set
	// itself, before its status writes named it, does not count.
	var writer string
	if controller != "" {
		writer = controllerid.LongHash(controller)
	}
	nsModes := map[string]string{annotations.ModesBy: f.NamespaceModesBy}
	if f.NamespaceAllowanceMode != "" {
		nsModes[annotations.AllowanceMode] = f.NamespaceAllowanceMode
	}
	parentModes, nsModes, setAside := decision.AllowanceModesForController(parent, nsModes, writer)
	ex.Mode = allowanceModeViewOf(parentModes, parent.GetNamespace(), "the parent "+decision.RefOf(parent).String(), nsModes, f.NamespaceUnknown)
	if len(setAside) > 0 {
		ex.Mode.Warning = strings.TrimSpace(ex.Mode.Warning + " " + strings.Join(setAside, " "))
	}
	if f.AllowancePoliciesError != "" {
		ex.Errors = append(ex.Errors, "the AllowancePolicies could not be read: "+f.AllowancePoliciesError)
	}
	compiled := make([]*allowance.Compiled, 0, len(f.AllowancePolicies))
	for _, u := range f.AllowancePolicies {
		compiled = append(compiled, allowance.Compile(u))
	}
	sort.Slice(compiled, func(i, j int) bool { return compiled[i].Name < compiled[j].Name })
	byName := map[string]*allowance.Compiled{}
	subject := subjectOf(controller)
	governed := false
	parentGroup, childGroup := parent.GroupVersionKind().Group, child.GroupVersionKind().Group
	for _, p := range compiled {
		byName[p.Name] = p
		governsParent, governsChild := p.SpeaksOf(parentGroup, parent.GetKind()), p.SpeaksOf(childGroup, child.GetKind())
		governed = governed || p.Governs(parentGroup, parent.GetKind())
		if controller == "" {
			continue
		}
		// The policies of other kinds say nothing about this write.
		if !governsParent && !governsChild {
			continue
		}
		if named, may := p.Names(subject); named {
			v := AllowancePolicyView{Name: p.Name, Kind: p.Kind(), Fields: p.Fields(), MayInitiate: may, Problems: p.Problems}
			if governsParent {
				v.Allows = p.Allows(childGroup, child.GetKind())
			} else {
				for _, k := range p.AllowedKinds() {
					v.PassesOn = append(v.PassesOn, k.String()+": "+strings.Join(p.Allows(groupOf(k), k.Kind), ", "))
				}
			}
			ex.Policies = append(ex.Policies, v)
		}
	}
	kind := child.GetKind()
	switch {
	case ex.Mode.Mode == allowance.ModeOff:
		ex.Check = "none: allowances are off for the parent"
		return ex
	case !governed:
		ex.Check = "none: no valid AllowancePolicy speaks of " + parent.GetKind() + ", so the writes of its children are not checked"
		return ex
	}
	switch decision.AllowanceCheckOf(d.Category) {
	case decision.UsesAllowances:
		ex.Check = "the write carries out a change of the parent (" + string(d.Category) + "): each mutation needs an unconsumed allowance for " +
			kind + " on the parent whose policy names the controller"
		s := settledView(parent, lookup(AllowanceFacts{Settledness: f.Settledness}, parent))
		ex.Settled = &s
		set, err := allowance.Parse(parent.GetAnnotations()[allowance.Annotation])
		if err != nil {
			ex.Errors = append(ex.Errors, decision.RefOf(parent).String()+": "+err.Error())
		}
		for _, a := range allowanceViews(set.Allowances, s) {
			if a.Kind != kind {
				continue
			}
			u := AllowanceUse{AllowanceView: a}
			p := byName[a.Policy]
			switch {
			case a.Consumed == "yes":
				u.Note = "consumed: the parent has settled at generation " + strconv.FormatInt(s.Generation, 10)
			case p == nil:
				u.Note = "its AllowancePolicy " + a.Policy + " does not exist"
			case !p.Valid():
				u.Note = "its AllowancePolicy " + a.Policy + " is invalid"
			case controller == "":
				u.Note = "the controller is not known, so whether " + a.Policy + " names it is not known"
			default:
				if named, _ := p.Names(subject); !named {
					u.Note = a.Policy + " does not name " + controller + " among its subjects"
					break
				}
				u.Usable = true
				u.Note = "usable by " + controller
				if a.Consumed == "unknown" {
					u.Note += " unless the parent has settled at generation " + strconv.FormatInt(a.Generation, 10) + " since (the plugin cannot tell)"
				}
				ex.Covered = appendMissingString(ex.Covered, a.Mutation)
			}
			ex.Allowances = append(ex.Allowances, u)
		}
	case decision.StandingDuty:
		ex.Check = "the write is a standing duty of the parent (" + string(d.Category) + "): no allowance is needed, but a valid policy for " +
			parent.GetKind() + " that names the controller must allow the mutation"
		for _, p := range ex.Policies {
			if len(p.Problems) == 0 && p.Kind == parent.GetKind() && len(p.Fields) > 0 {
				for _, m := range p.Allows {
					ex.Covered = appendMissingString(ex.Covered, m)
				}
			}
		}
	default:
		ex.Check = "none for this verdict (" + string(d.Category) + "): only writes that carry out a change of the parent, or a standing duty, are checked"
		return ex
	}
	sort.Strings(ex.Covered)
	what := "a violation: "
	switch ex.Mode.Mode {
	case allowance.ModeEnforce:
		what += "denied (enforce)"
	case allowance.ModeLog:
		what += "allowed with a warning and reported (log)"
	default:
		what += "logged only (shadow)"
	}
	if len(ex.Covered) == 0 {
		ex.Uncovered = "every mutation of " + kind + " " + child.GetName() + " (create, delete, any field path) is " + what
	} else {
		ex.Uncovered = "any other mutation of " + kind + " " + child.GetName() + " (other than " + strings.Join(ex.Covered, ", ") +
			" and the field paths below them) is " + what
	}
	return ex
}

func appendMissingString(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func (p *printer) allowanceSection(a *AllowanceExplanation) {
	p.line("Allowances:  %s", a.Mode)
	if a.Mode.Warning != "" {
		p.line("  warning:   %s", a.Mode.Warning)
	}
	if a.Mode.Mode == allowance.ModeOff {
		return
	}
	p.line("  check:     %s", a.Check)
	if a.Settled != nil {
		p.line("  parent settled %s", settledText(*a.Settled))
	}
	for _, u := range a.Allowances {
		p.line("  on parent: %s %s (generation %d, consumed %s, by %s via %s): %s", u.Kind, u.Mutation, u.Generation, u.Consumed,
			orNone(u.Initiator), u.Policy, u.Note)
		p.line("             trace: %s", allowanceTrace(u.Trace))
	}
	if a.Uncovered != "" {
		covered := strings.Join(a.Covered, ", ")
		if covered == "" {
			covered = "nothing"
		}
		p.line("  covered:   %s", covered)
		p.line("  uncovered: %s", a.Uncovered)
	}
	for _, pv := range a.Policies {
		initiate := "no"
		if pv.MayInitiate {
			initiate = "yes"
		}
		what := "allows " + strings.Join(pv.Allows, ", ")
		switch {
		case len(pv.PassesOn) > 0:
			what = "passes on " + strings.Join(pv.PassesOn, "; ")
		case len(pv.Allows) == 0:
			what = "allows nothing of " + a.childKind
		}
		p.line("  policy:    %s names the controller (%s %s; may initiate: %s; %s)", pv.Name, pv.Kind,
			strings.Join(pv.Fields, ", "), initiate, what)
		for _, pr := range pv.Problems {
			p.line("               invalid: %s", strings.Join(strings.Fields(pr.String()), " "))
		}
	}
	for _, e := range a.Errors {
		p.line("  error:     %s", e)
	}
}

// groupOf is the group an allowed kind names, or the core group for a
// kind named in every group: either way its own mutations are listed.
func groupOf(k allowance.AllowedKind) string {
	if k.Group == nil {
		return ""
	}
	return *k.Group
}
