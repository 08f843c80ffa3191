package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func policyFrom(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	if u.GetUID() == "" {
		u.SetUID("uid-1")
	}
	return u
}

const designPolicy = `
apiVersion: kausality.io/v1alpha1
kind: ApprovalPolicy
metadata:
  name: controller-l1-compute
  namespace: infra
  generation: 1
spec:
  rules:
  - apiVersion: "v1"
    kind: "ConfigMap"
    namespace: "*"
    name: "*"
    prereqs:
      cel: "object.metadata.labels['env'] == 'dev'"
    match:
      regexp: '{"data":{"version":".*"}}'
    mode: "always"
    expiry: "2026-06-01T00:00:00Z"
`

func configMap(env string, data map[string]any) map[string]any {
	meta := map[string]any{"name": "cm", "namespace": "team"}
	if env != "" {
		meta["labels"] = map[string]any{"env": env}
	}
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
}

func TestDesiredJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"configmap", configMap("dev", map[string]any{"version": "2", "a": "<b>"}), `{"data":{"a":"<b>","version":"2"}}`},
		{"spec and status", map[string]any{"apiVersion": "x/v1", "kind": "K", "metadata": map[string]any{"name": "n"},
			"spec": map[string]any{"z": int64(1), "a": []any{"x", map[string]any{"b": true, "a": nil}}}, "status": map[string]any{"ready": true}},
			`{"spec":{"a":["x",{"a":null,"b":true}],"z":1}}`},
		{"nothing desired", map[string]any{"apiVersion": "v1", "kind": "K", "metadata": map[string]any{}}, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DesiredJSON(tc.obj)
			if err != nil || got != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestCompileProblems(t *testing.T) {
	rule := func(extra string) string {
		return `
apiVersion: kausality.io/v1alpha1
kind: ApprovalPolicy
metadata: {name: p, namespace: ns, generation: 1}
spec:
  rules:
  - apiVersion: v1
    kind: ConfigMap
` + extra
	}
	for _, tc := range []struct {
		name, doc, reason, contains string
	}{
		{"design format compiles", designPolicy, "", ""},
		{"invalid CEL", rule("    mode: always\n    match: {cel: 'object.data.version =='}\n"), v1alpha1.ReasonInvalid, "match.cel: compilation failed"},
		{"not bool", rule("    mode: always\n    prereqs: {cel: '1 + 1'}\n"), v1alpha1.ReasonInvalid, "must evaluate to bool"},
		{"statically too costly", rule("    mode: always\n    match: {cel: '" + costly + "'}\n"), v1alpha1.ReasonCostExceeded, "exceeds the cost limit"},
		{"bad regexp", rule("    mode: always\n    match: {regexp: '(['}\n"), v1alpha1.ReasonInvalid, "match.regexp"},
		{"bad expiry", rule("    mode: always\n    expiry: tomorrow\n"), v1alpha1.ReasonInvalid, "expiry"},
		{"once unsupported", rule("    mode: once\n"), v1alpha1.ReasonUnsupportedMode, "mode once"},
		{"bad glob", rule("    mode: always\n    name: '[x'\n"), v1alpha1.ReasonInvalid, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compile(policyFrom(t, tc.doc))
			if tc.reason == "" {
				if len(c.Problems) != 0 {
					t.Fatalf("problems: %+v", c.Problems)
				}
				return
			}
			if len(c.Problems) != 1 || c.Problems[0].Reason != tc.reason || !strings.Contains(c.Problems[0].Message, tc.contains) {
				t.Fatalf("problems %+v, want one %s containing %q", c.Problems, tc.reason, tc.contains)
			}
			// A rule with a problem never matches.
			res := Evaluate([]*Compiled{c}, Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team", Name: "cm",
				Old: configMap("dev", nil), New: configMap("dev", map[string]any{"version": "1"}), Now: time.Unix(0, 0)})
			if res.Hit != nil {
				t.Fatalf("a broken rule matched: %+v", res.Hit)
			}
		})
	}
}

// costly costs 100^3 iterations even at its cheapest.
var costly = `[` + hundred + `].map(a, [` + hundred + `].map(b, [` + hundred + `].map(c, a + b + c))).size() > 0`

var hundred = func() string {
	s := make([]string, 100)
	for i := range s {
		s[i] = "1"
	}
	return strings.Join(s, ",")
}()

func TestEvaluate(t *testing.T) {
	design := Compile(policyFrom(t, designPolicy))
	before := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	after := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	req := func(oldEnv string, data map[string]any, now time.Time) Request {
		return Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "cm",
			Old: configMap(oldEnv, map[string]any{"version": "1"}), New: configMap("prod", data), Now: now}
	}
	newOrigins := Compile(policyFrom(t, `
apiVersion: kausality.io/v1alpha1
kind: ClusterApprovalPolicy
metadata: {name: c, generation: 1}
spec:
  serviceAccounts: [{namespace: infra, name: ctrl}]
  rules:
  - {apiVersion: v1, kind: ConfigMap, name: "c?", mode: always, newOrigins: true, match: {cel: "object.data.version == oldObject.data.version + '0'"}}
`))
	// Matching 100 kB against a few hundred instructions costs more than
	// the limit; against one byte, nearly nothing.
	bigRegexp := Compile(policyFrom(t, `
apiVersion: kausality.io/v1alpha1
kind: ApprovalPolicy
metadata: {name: p, namespace: infra, generation: 3}
spec:
  rules:
  - {apiVersion: v1, kind: ConfigMap, mode: always, match: {regexp: '{"data":{"v":"[a-z]{0,400}"}}'}}
`))
	for _, tc := range []struct {
		name     string
		policies []*Compiled
		req      Request
		hit      string
		problem  string
	}{
		{"design: prereq holds, regexp matches", []*Compiled{design}, req("dev", map[string]any{"version": "2"}, before), "ApprovalPolicy infra/controller-l1-compute rule 0", ""},
		{"design: prereq false", []*Compiled{design}, req("prod", map[string]any{"version": "2"}, before), "", ""},
		{"design: prereq errors (no labels)", []*Compiled{design}, req("", map[string]any{"version": "2"}, before), "", ""},
		{"design: expired", []*Compiled{design}, req("dev", map[string]any{"version": "2"}, after), "", ""},
		{"design: regexp needs the whole JSON", []*Compiled{design}, req("dev", map[string]any{"other": "2"}, before), "", ""},
		{"design: create has no stored object", []*Compiled{design}, Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "cm", New: configMap("dev", map[string]any{"version": "2"}), Now: before}, "", ""},
		{"design: other namespace", []*Compiled{design}, func() Request {
			r := req("dev", map[string]any{"version": "2"}, before)
			r.Namespace = "team"
			return r
		}(), "", ""},
		{"design: other kind", []*Compiled{design}, Request{APIVersion: "v1", Kind: "Secret", Namespace: "infra", Name: "cm", Old: configMap("dev", nil), New: configMap("dev", map[string]any{"version": "2"}), Now: before}, "", ""},
		{"design: not for new origins", []*Compiled{design}, func() Request { r := req("dev", map[string]any{"version": "2"}, before); r.NewOrigin = true; return r }(), "", ""},
		{"glob name and oldObject", []*Compiled{design, newOrigins}, Request{APIVersion: "v1", Kind: "ConfigMap", Name: "c1",
			Old: configMap("prod", map[string]any{"version": "1"}), New: configMap("prod", map[string]any{"version": "10"}), NewOrigin: true}, "ClusterApprovalPolicy c rule 0", ""},
		{"glob name mismatch", []*Compiled{newOrigins}, Request{APIVersion: "v1", Kind: "ConfigMap", Name: "c12",
			Old: configMap("prod", map[string]any{"version": "1"}), New: configMap("prod", map[string]any{"version": "10"})}, "", ""},
		{"regexp too costly for the object", []*Compiled{bigRegexp}, Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "x",
			New: configMap("", map[string]any{"v": strings.Repeat("a", 100_000)})}, "", v1alpha1.ReasonCostExceeded},
		{"regexp within the limit", []*Compiled{bigRegexp}, Request{APIVersion: "v1", Kind: "ConfigMap", Namespace: "infra", Name: "x",
			New: configMap("", map[string]any{"v": "a"})}, "ApprovalPolicy infra/p rule 0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Evaluate(tc.policies, tc.req)
			got := ""
			if res.Hit != nil {
				got = res.Hit.String()
			}
			if got != tc.hit {
				t.Errorf("hit %q, want %q", got, tc.hit)
			}
			gotProblem := ""
			if len(res.Problems) > 0 {
				gotProblem = res.Problems[0].Reason
			}
			if gotProblem != tc.problem {
				t.Errorf("problems %+v, want %q", res.Problems, tc.problem)
			}
		})
	}
}

func TestCacheCompilesOncePerGeneration(t *testing.T) {
	c := NewCache()
	u := policyFrom(t, designPolicy)
	first := c.Get(u)
	u.SetResourceVersion("2") // a status write
	if c.Get(u) != first {
		t.Fatal("recompiled for a new resourceVersion of the same generation")
	}
	u.SetGeneration(2)
	if c.Get(u) == first {
		t.Fatal("not recompiled for a new generation")
	}
}

func TestServiceAccountOf(t *testing.T) {
	for user, want := range map[string]string{
		"system:serviceaccount:infra:ctrl": "infra/ctrl",
		"system:serviceaccount:infra":      "",
		"alice":                            "",
		"system:serviceaccount:a:b:c":      "",
	} {
		sa, ok := ServiceAccountOf(user)
		got := ""
		if ok {
			got = sa.Namespace + "/" + sa.Name
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", user, got, want)
		}
	}
}
