package allowance

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// compileYAML compiles an AllowancePolicy written as YAML.
func compileYAML(t *testing.T, doc string) *Compiled {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("policy YAML: %v", err)
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatalf("policy: %v", err)
	}
	return Compile(&u)
}

// policyYAML is a policy with the given spec (indented by two spaces).
func policyYAML(name, spec string) string {
	return "apiVersion: kausal.io/v1alpha1\nkind: AllowancePolicy\nmetadata:\n  name: " + name + "\n  generation: 3\nspec:\n" + spec
}

const validSpec = `  match:
    kind: Deployment
    fields: ["spec.replicas", "spec.template.spec.containers[*].image"]
    cel: ["has(object.metadata.annotations) && has(object.metadata.annotations.jira)"]
    capture: ["metadata.annotations[jira]"]
  subjects:
  - {kind: Group, name: platform-team, mayInitiate: true}
  - {kind: User, name: hans@example.com, mayInitiate: true}
  - {kind: ServiceAccount, namespace: kube-system, name: deployment-controller}
  allow:
  - {kind: ReplicaSet, relation: Child, mutations: ["spec.replicas", "create", "delete"]}
`

func TestCompile(t *testing.T) {
	tests := []struct {
		name string
		spec string
		// problems: each must appear in the Ready condition's message.
		problems []string
		reason   string
	}{
		{name: "valid", spec: validSpec},
		{name: "relation defaults to Child", spec: strings.Replace(validSpec, "relation: Child, ", "", 1)},
		{name: "no parent kind", spec: strings.Replace(validSpec, "kind: Deployment", "kind: \"\"", 1),
			problems: []string{"spec.match.kind: the parent kind is required"}, reason: ReasonInvalid},
		{name: "no fields", spec: strings.Replace(validSpec, `fields: ["spec.replicas", "spec.template.spec.containers[*].image"]`, "fields: []", 1),
			problems: []string{"spec.match.fields: at least one field is required"}, reason: ReasonInvalid},
		{name: "a broken field", spec: strings.Replace(validSpec, `"spec.replicas", "spec.template`, `"spec.replicas", "spec[.template`, 1),
			problems: []string{"spec.match.fields[1]:"}, reason: ReasonInvalid},
		{name: "CEL that does not compile", spec: strings.Replace(validSpec, `cel: ["has(`, `cel: ["object.( || has(`, 1),
			problems: []string{"spec.match.cel[0]: compilation failed"}, reason: ReasonInvalid},
		{name: "CEL that is not boolean", spec: strings.Replace(validSpec, `cel: ["has(object.metadata.annotations) && has(object.metadata.annotations.jira)"]`, `cel: ["1 + 2"]`, 1),
			problems: []string{"spec.match.cel[0]: must evaluate to bool"}, reason: ReasonInvalid},
		{name: "CEL beyond the cost limit", spec: strings.Replace(validSpec, `cel: ["has(object.metadata.annotations) && has(object.metadata.annotations.jira)"]`,
			`cel: ["object.spec.items.all(a, object.spec.items.all(b, object.spec.items.all(c, a == b && b == c)))"]`, 1),
			problems: []string{"spec.match.cel[0]: estimated cost"}, reason: ReasonCostExceeded},
		{name: "a wildcard in capture", spec: strings.Replace(validSpec, `capture: ["metadata.annotations[jira]"]`, `capture: ["spec.containers[*].image"]`, 1),
			problems: []string{"spec.match.capture[0]:", "[*] names many"}, reason: ReasonInvalid},
		{name: "unknown subject kind", spec: strings.Replace(validSpec, "kind: Group, name: platform-team", "kind: Team, name: platform-team", 1),
			problems: []string{`spec.subjects[0]: unknown kind "Team"`}, reason: ReasonInvalid},
		{name: "service account without namespace", spec: strings.Replace(validSpec, "namespace: kube-system, ", "", 1),
			problems: []string{"spec.subjects[2]: a ServiceAccount needs its namespace"}, reason: ReasonInvalid},
		{name: "user with namespace", spec: strings.Replace(validSpec, "kind: User, name", "kind: User, namespace: x, name", 1),
			problems: []string{"spec.subjects[1]: only a ServiceAccount has a namespace"}, reason: ReasonInvalid},
		{name: "no subjects", spec: strings.Split(validSpec, "  subjects:")[0] + "  subjects: []\n  allow:\n  - {kind: ReplicaSet, mutations: [create]}\n",
			problems: []string{"spec.subjects: at least one subject is required"}, reason: ReasonInvalid},
		{name: "unknown relation", spec: strings.Replace(validSpec, "relation: Child", "relation: Sibling", 1),
			problems: []string{`spec.allow[0].relation: unknown relation "Sibling"`}, reason: ReasonInvalid},
		{name: "a mutation that is neither a path nor an operation", spec: strings.Replace(validSpec, `"create", "delete"`, `"create", "spec[x"`, 1),
			problems: []string{"spec.allow[0].mutations[2]:", "a mutation is a field path, create or delete"}, reason: ReasonInvalid},
		{name: "no mutations", spec: strings.Replace(validSpec, `mutations: ["spec.replicas", "create", "delete"]`, "mutations: []", 1),
			problems: []string{"spec.allow[0].mutations: at least one mutation is required"}, reason: ReasonInvalid},
		{name: "no child kind", spec: strings.Replace(validSpec, "{kind: ReplicaSet, ", "{", 1),
			problems: []string{"spec.allow[0].kind: the child kind is required"}, reason: ReasonInvalid},
		{name: "unreadable", spec: "  match: 3\n", problems: []string{"cannot read the policy"}, reason: ReasonInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compileYAML(t, policyYAML("p", tt.spec))
			cond := StatusCondition(c)
			if cond.Type != ConditionReady || cond.ObservedGeneration != 3 {
				t.Errorf("condition %+v: want Ready at generation 3", cond)
			}
			if len(tt.problems) == 0 {
				if !c.Valid() || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonCompiled {
					t.Fatalf("want a valid policy, got problems %v, condition %+v", c.Problems, cond)
				}
				return
			}
			if c.Valid() || cond.Status != metav1.ConditionFalse || cond.Reason != tt.reason {
				t.Fatalf("want an invalid policy (%s), got condition %+v", tt.reason, cond)
			}
			for _, p := range tt.problems {
				if !strings.Contains(cond.Message, p) {
					t.Errorf("condition message %q lacks %q", cond.Message, p)
				}
			}
			if !strings.Contains(cond.Message, "grants no allowances until they are fixed") {
				t.Errorf("condition message %q does not say the policy is off", cond.Message)
			}
		})
	}
}

func TestStatusConditionWithEvaluationProblems(t *testing.T) {
	c := compileYAML(t, policyYAML("p", validSpec))
	cond := StatusCondition(c, Problem{Field: "spec.match.cel[0]", Reason: ReasonCostExceeded, Message: "evaluation exceeded the cost limit"})
	if cond.Status != metav1.ConditionFalse || cond.Reason != ReasonCostExceeded ||
		!strings.Contains(cond.Message, "spec.match.cel[0]: evaluation exceeded the cost limit") ||
		strings.Contains(cond.Message, "until they are fixed") {
		t.Errorf("condition %+v", cond)
	}
}

func TestMatchesSubject(t *testing.T) {
	c := compileYAML(t, policyYAML("p", validSpec))
	tests := []struct {
		name          string
		subject       Subject
		matched, init bool
	}{
		{"a user named", Subject{User: "hans@example.com"}, true, true},
		{"a member of a group", Subject{User: "eve", Groups: []string{"system:authenticated", "platform-team"}}, true, true},
		{"the service account, which may not initiate", Subject{User: "system:serviceaccount:kube-system:deployment-controller"}, true, false},
		{"a service account of that name elsewhere", Subject{User: "system:serviceaccount:default:deployment-controller"}, false, false},
		{"anyone else", Subject{User: "mallory", Groups: []string{"system:authenticated"}}, false, false},
	}
	for _, tt := range tests {
		if m, i := c.matchesSubject(tt.subject); m != tt.matched || i != tt.init {
			t.Errorf("%s: matched %v, mayInitiate %v; want %v, %v", tt.name, m, i, tt.matched, tt.init)
		}
	}
}
