package kubectlplugin

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// shippedAllowancePolicies are the policies shipped for
// kube-controller-manager, as the cluster returns them.
func shippedAllowancePolicies(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile("../../manifests/allowances/kube-controller-manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// A person scaled the Deployment to generation 4 (not carried out yet);
// generation 3's rollout allowances are consumed; one allowance names a
// policy that does not name the deployment controller; one is for Pods.
const parentAllowances = `[` +
	`{"kind":"ReplicaSet","mutation":"create","generation":3,"initiator":"alice","policy":"deployment-rollout","trace":[{"kind":"Deployment","name":"web","generation":3,"field":"spec.template.spec.containers[0].image"}]},` +
	`{"kind":"ReplicaSet","mutation":"spec.replicas","generation":4,"initiator":"bob","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":4,"field":"spec.replicas"}]},` +
	`{"kind":"ReplicaSet","mutation":"spec.template","generation":4,"initiator":"bob","policy":"team-templates","trace":[{"kind":"Deployment","name":"web","generation":4,"field":"spec.replicas"}]},` +
	`{"kind":"Pod","mutation":"create","generation":4,"initiator":"bob","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":4,"field":"spec.replicas"}]}]`

func teamPolicy(t *testing.T) *unstructured.Unstructured {
	return obj(t, `{"apiVersion":"kausal.io/v1alpha1","kind":"AllowancePolicy","metadata":{"name":"team-templates"},
	"spec":{"match":{"kind":"Deployment","fields":["spec.replicas"]},"subjects":[{"kind":"ServiceAccount","namespace":"team","name":"operator"}],
	"allow":[{"kind":"ReplicaSet","mutations":["spec.template"]}]}}`)
}

func allowanceWhyFacts(t *testing.T, busy bool, parentExtra map[string]string, nsMode string) Facts {
	ann := map[string]string{annotations.Controllers: controllerid.Hash(deployCtrl), allowance.Annotation: parentAllowances}
	for k, v := range parentExtra {
		ann[k] = v
	}
	return Facts{Child: replicaSet(t, traceTwoHops, true), Parent: deployment(t, busy, ann), NamespaceMode: "enforce",
		NamespaceAllowanceMode: nsMode, AllowancePolicies: append(shippedAllowancePolicies(t), teamPolicy(t)),
		Settledness: records(map[string]settle.Record{"d-1": {Settled: "old", SettledAt: 3, Current: "new", Since: 4}}, ""),
		Now:         now, DefaultMode: annotations.ModeLog, UngatedKinds: config.DefaultUngatedChildKinds, UngatedSource: "the defaults"}
}

func TestWhyAllowancesGolden(t *testing.T) {
	tests := []struct {
		name string
		f    func(t *testing.T) Facts
	}{
		{"allowances-expected", func(t *testing.T) Facts { return allowanceWhyFacts(t, true, nil, "enforce") }},
		{"allowances-not-checked-for-drift", func(t *testing.T) Facts {
			return allowanceWhyFacts(t, false, map[string]string{annotations.AllowanceMode: "log"}, "")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			RenderWhy(&buf, Explain(tt.f(t)), "replicaset/web-6d4")
			golden(t, "why-"+tt.name, buf.String())
		})
	}
}

// The check follows the drift verdict's category and the parent's mode;
// the covered mutations are those of usable allowances (or, for a standing
// duty, of the policies that name the controller).
func TestWhyAllowances(t *testing.T) {
	tests := []struct {
		name       string
		category   decision.Category
		parentMode string
		nsMode     string
		policies   string
		controller string
		wantMode   allowance.Mode
		wantCheck  string
		covered    string
		uncovered  string
	}{
		{"carrying out a scale", decision.Expected, "", "enforce", "shipped", deployCtrl, allowance.ModeEnforce, "carries out a change", "spec.replicas", "denied (enforce)"},
		{"the parent's mode wins", decision.Expected, "shadow", "enforce", "shipped", deployCtrl, allowance.ModeShadow, "carries out a change", "spec.replicas", "logged only (shadow)"},
		{"initializing parent", decision.ParentInitializing, "", "log", "shipped", deployCtrl, allowance.ModeLog, "carries out a change", "spec.replicas", "allowed with a warning"},
		// The shipped policies name system:authenticated, so every
		// controller may use what they grant.
		{"any authenticated controller under the shipped policies", decision.Expected, "", "enforce", "shipped", "system:serviceaccount:team:other", allowance.ModeEnforce, "carries out a change", "spec.replicas", "denied"},
		{"a controller no policy names", decision.Expected, "", "enforce", "team", "system:serviceaccount:team:other", allowance.ModeEnforce, "carries out a change", "", "every mutation"},
		{"the team operator", decision.Expected, "", "enforce", "team", "system:serviceaccount:team:operator", allowance.ModeEnforce, "carries out a change", "spec.template", "denied"},
		{"standing duty", decision.SelfHealing, "", "enforce", "shipped", deployCtrl, allowance.ModeEnforce, "standing duty", "create,delete,spec.minReadySeconds,spec.replicas", "denied"},
		{"drift is not checked", decision.DriftUnapproved, "", "enforce", "shipped", deployCtrl, allowance.ModeEnforce, "none for this verdict", "", ""},
		{"off", decision.Expected, "", "", "shipped", deployCtrl, allowance.ModeOff, "none: allowances are off", "", ""},
		{"no policy for the parent kind", decision.Expected, "", "enforce", "none", deployCtrl, allowance.ModeEnforce, "none: no valid AllowancePolicy speaks of Deployment", "", ""},
		{"policies for a Deployment of another group", decision.Expected, "", "enforce", "othergroup", deployCtrl, allowance.ModeEnforce, "none: no valid AllowancePolicy speaks of Deployment", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := allowanceWhyFacts(t, true, nil, tt.nsMode)
			if tt.parentMode != "" {
				ann := f.Parent.GetAnnotations()
				ann[annotations.AllowanceMode] = tt.parentMode
				f.Parent.SetAnnotations(ann)
			}
			switch tt.policies {
			case "none":
				f.AllowancePolicies = nil
			case "team":
				f.AllowancePolicies = f.AllowancePolicies[len(f.AllowancePolicies)-1:]
			case "othergroup":
				for _, p := range f.AllowancePolicies {
					if err := unstructured.SetNestedField(p.Object, "example.com", "spec", "match", "group"); err != nil {
						t.Fatal(err)
					}
				}
			}
			ex := explainAllowances(f, tt.controller, decision.Decision{Category: tt.category})
			if ex.Mode.Mode != tt.wantMode {
				t.Errorf("mode %q, want %q (%s)", ex.Mode.Mode, tt.wantMode, ex.Mode.Source)
			}
			if !strings.Contains(ex.Check, tt.wantCheck) {
				t.Errorf("check %q, want it to say %q", ex.Check, tt.wantCheck)
			}
			if got := strings.Join(ex.Covered, ","); got != tt.covered {
				t.Errorf("covered %q, want %q", got, tt.covered)
			}
			if !strings.Contains(ex.Uncovered, tt.uncovered) || (tt.uncovered == "") != (ex.Uncovered == "") {
				t.Errorf("uncovered %q, want it to say %q", ex.Uncovered, tt.uncovered)
			}
		})
	}
}
