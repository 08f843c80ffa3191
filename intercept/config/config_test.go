package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/lifecycle"
)

const valid = `apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
resourceRules:
  include:
  - apiGroups: ["apps", "example.com"]
    resources: ["*"]
  exclude:
  - apiGroups: ["apps"]
    resources: ["daemonsets"]
excludedNamespaces: [kube-system, sandbox]
controllers:
- name: deployment-controller
  match:
    serviceAccount: kube-system/deployment-controller
  mode: shadow
- name: replicaset-controller
  match:
    user: system:serviceaccount:kube-system:replicaset-controller
  mode: enforce
- name: platform
  match:
    group: platform-team
  mode: log
- name: argo
  match:
    serviceAccount: argocd/argocd-application-controller
    fieldManager: argocd-controller
  mode: enforce
lifecycle:
- apiGroup: apps
  kind: ReplicaSet
  order: [ObservedGenerationCurrent]
ungatedChildKinds:
- kind: Pod
- kind: Secret
  parent:
    apiGroup: cert-manager.io
    kind: Certificate
unboundStatusRecordDelays:
- apiGroup: cache.example.com
  kind: Memcached
  delay: 2m
- kind: ConfigMap
  delay: 0s
`

func TestParseValid(t *testing.T) {
	cfg, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		group, resource, ns string
		want                bool
	}{
		{"apps", "deployments", "prod", true},
		{"apps", "daemonsets", "prod", false},
		{"", "configmaps", "prod", false},
		{"example.com", "widgets", "prod", true},
		{"apps", "deployments", "sandbox", false},
		{"apps", "deployments", "kube-public", true},
		{"coordination.k8s.io", "leases", "prod", false},
	} {
		if got := cfg.Rules.Targets(tc.group, tc.resource, tc.ns); got != tc.want {
			t.Errorf("Targets(%s, %s, %s) = %v", tc.group, tc.resource, tc.ns, got)
		}
	}
	matches := []struct {
		user    user.Info
		manager string
		want    string
	}{
		{&user.DefaultInfo{Name: "system:serviceaccount:kube-system:deployment-controller"}, "kube-controller-manager", "deployment-controller"},
		{&user.DefaultInfo{Name: "system:serviceaccount:kube-system:replicaset-controller"}, "kube-controller-manager", "replicaset-controller"},
		{&user.DefaultInfo{Name: "jane", Groups: []string{"devs", "platform-team"}}, "kubectl", "platform"},
		{&user.DefaultInfo{Name: "system:serviceaccount:argocd:argocd-application-controller"}, "argocd-controller", "argo"},
		// The field manager narrows the service account; alone it selects
		// nothing: anybody can send any manager string.
		{&user.DefaultInfo{Name: "system:serviceaccount:argocd:argocd-application-controller"}, "kubectl", ""},
		{&user.DefaultInfo{Name: "bob"}, "argocd-controller", ""},
		{&user.DefaultInfo{Name: "bob"}, "kubectl", ""},
	}
	for _, m := range matches {
		got := ""
		if c := cfg.ControllerFor(m.user, m.manager); c != nil {
			got = c.Name
		}
		if got != m.want {
			t.Errorf("ControllerFor(%s, %s) = %q, want %q", m.user.GetName(), m.manager, got, m.want)
		}
	}
	rs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"generation": int64(1)}, "status": map[string]any{"observedGeneration": int64(1)}}}
	if got := cfg.Lifecycle.Detect(rs).Phase; got != lifecycle.Initialized {
		t.Errorf("ReplicaSet with ObservedGenerationCurrent: %s", got)
	}
	for _, tc := range []struct {
		kind  schema.GroupKind
		want  time.Duration
		found bool
	}{
		{schema.GroupKind{Group: "cache.example.com", Kind: "Memcached"}, 2 * time.Minute, true},
		{schema.GroupKind{Kind: "ConfigMap"}, 0, true},
		{schema.GroupKind{Group: "example.com", Kind: "Memcached"}, 0, false},
		{schema.GroupKind{Kind: "Memcached"}, 0, false},
	} {
		if got, found := cfg.UnboundStatusRecordDelay(tc.kind); got != tc.want || found != tc.found {
			t.Errorf("UnboundStatusRecordDelay(%s) = %s, %v; want %s, %v", tc.kind, got, found, tc.want, tc.found)
		}
	}
	wantUngated := []decision.UngatedKind{{Child: schema.GroupKind{Kind: "Pod"}},
		{Child: schema.GroupKind{Kind: "Secret"}, Parent: schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}}}
	if !slices.Equal(cfg.UngatedChildKinds, wantUngated) {
		t.Errorf("ungated child kinds %v, want %v", cfg.UngatedChildKinds, wantUngated)
	}
	if _, found := Default().UnboundStatusRecordDelay(schema.GroupKind{Group: "cache.example.com", Kind: "Memcached"}); found {
		t.Error("the default configuration sets a delay of its own")
	}
}

func TestParseErrorsNameLineAndField(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"bad mode", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: a\n  match:\n    user: x\n  mode: strict\n",
			`line 7: controllers[0].mode: must be shadow, log or enforce, not "strict"`},
		//nolint:misspell // the misspelt field is the test case
		{"unknown field", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrolers: []\n",
			"line 3: field controlers not found in type config.File"},
		{"two matchers", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: a\n  match:\n    user: x\n    group: y\n  mode: log\n",
			"line 5: controllers[0].match: set exactly one of user, serviceAccount, group (fieldManager only narrows one of them: a client chooses its field manager freely)"},
		{"a field manager alone", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: a\n  match:\n    fieldManager: argocd\n  mode: log\n",
			"line 5: controllers[0].match: set exactly one of user, serviceAccount, group (fieldManager only narrows one of them: a client chooses its field manager freely)"},
		{"bad service account", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: a\n  match:\n    serviceAccount: justname\n  mode: log\n",
			`line 6: controllers[0].match.serviceAccount: must be namespace/name, not "justname"`},
		{"missing name", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- match:\n    user: x\n  mode: log\n",
			"line 4: controllers[0].name: required"},
		{"bad check", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nlifecycle:\n- kind: Foo\n  order: [Whenever]\n",
			`line 5: lifecycle[0].order[0]: unknown initialization check "Whenever"`},
		{"subresource rule", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nresourceRules:\n  include:\n  - apiGroups: [apps]\n    resources: [deployments/scale]\n",
			`line 5: resourceRules.include[0]: resource "deployments/scale": subresources are not selected by rules`},
		{"an ungated kind's parent without a kind", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Secret\n  parent:\n    apiGroup: cert-manager.io\n",
			`line 5: ungatedChildKinds[0].parent.kind: required: the kind of the parents under which Secret is ungated (leave parent out to ungate it under every parent)`},
		{"an ungated kind's empty parent", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Secret\n  parent:\n",
			`line 5: ungatedChildKinds[0].parent: must name the kind of the parents under which Secret is ungated (apiGroup and kind), or be left out to ungate it under every parent`},
		{"an ungated kind's null parent", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Pod\n- kind: Secret\n  parent: null\n",
			`line 6: ungatedChildKinds[1].parent: must name the kind`},
		{"an ungated kind's parent as ~", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Secret\n  parent: ~\n",
			`line 5: ungatedChildKinds[0].parent: must name the kind`},
		{"an ungated kind's group with a version", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- apiGroup: batch/v1\n  kind: Job\n",
			`line 4: ungatedChildKinds[0].apiGroup: must be an API group without a version ("batch", not "batch/v1"); v1 is the version`},
		{"an ungated kind's parent group with a version", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Secret\n  parent:\n    apiGroup: cert-manager.io/v1\n    kind: Certificate\n",
			`line 6: ungatedChildKinds[0].parent.apiGroup: must be an API group without a version ("cert-manager.io", not "cert-manager.io/v1")`},
		{"a lifecycle group with a version", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nlifecycle:\n- apiGroup: apps/v1\n  kind: ReplicaSet\n  order: [ObservedGenerationCurrent]\n",
			`line 4: lifecycle[0].apiGroup: must be an API group without a version ("apps", not "apps/v1")`},
		{"a delay's group with a version", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nunboundStatusRecordDelays:\n- apiGroup: cache.example.com/v1alpha1\n  kind: Memcached\n  delay: 1m\n",
			`line 4: unboundStatusRecordDelays[0].apiGroup: must be an API group without a version ("cache.example.com", not "cache.example.com/v1alpha1")`},
		{"delay without a unit", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nunboundStatusRecordDelays:\n- kind: Memcached\n  delay: \"45\"\n",
			`line 5: unboundStatusRecordDelays[0].delay: must be a duration such as "45s" or "2m", not "45"`},
		{"negative delay", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nunboundStatusRecordDelays:\n- kind: Memcached\n  delay: -1s\n",
			`line 5: unboundStatusRecordDelays[0].delay: must not be negative, not -1s`},
		{"delay beyond the bound", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nunboundStatusRecordDelays:\n- kind: Memcached\n  delay: 2h\n",
			`line 5: unboundStatusRecordDelays[0].delay: must be at most 1h0m0s (until the record lands, the parent's controller writes pass as carrying out its spec), not 2h`},
		{"missing delay", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nunboundStatusRecordDelays:\n- kind: Memcached\n",
			`line 4: unboundStatusRecordDelays[0].delay: required: a duration such as "45s" or "2m" ("0s" records at once)`},
		{"delay without a kind", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nunboundStatusRecordDelays:\n- apiGroup: cache.example.com\n  delay: 1m\n",
			`line 4: unboundStatusRecordDelays[0].kind: required`},
		{"a kind listed twice", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nunboundStatusRecordDelays:\n- apiGroup: cache.example.com\n  kind: Memcached\n  delay: 1m\n- apiGroup: cache.example.com\n  kind: Memcached\n  delay: 2m\n",
			`line 8: unboundStatusRecordDelays[1].kind: Memcached.cache.example.com is listed twice`},
		{"an ungated kind listed twice", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Pod\n- apiGroup: batch\n  kind: Job\n- kind: Pod\n",
			`line 7: ungatedChildKinds[2]: Pod is listed twice (also ungatedChildKinds[0])`},
		{"an ungated kind under one parent listed twice", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Secret\n  parent: {apiGroup: cert-manager.io, kind: Certificate}\n- kind: Secret\n  parent: {apiGroup: cert-manager.io, kind: Certificate}\n",
			`line 6: ungatedChildKinds[1]: Secret under Certificate.cert-manager.io is listed twice (also ungatedChildKinds[0])`},
		{"an ungated kind under a parent after the same kind under every parent", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Secret\n- kind: Secret\n  parent: {apiGroup: cert-manager.io, kind: Certificate}\n",
			`line 5: ungatedChildKinds[1]: Secret under Certificate.cert-manager.io overlaps ungatedChildKinds[0]: Secret ungates Secret under every parent, so the entry Secret under Certificate.cert-manager.io has no effect; keep one of them`},
		{"an ungated kind under every parent after the same kind under a parent", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n- kind: Secret\n  parent: {apiGroup: cert-manager.io, kind: Certificate}\n- kind: Secret\n",
			`line 6: ungatedChildKinds[1]: Secret overlaps ungatedChildKinds[0]: Secret ungates Secret under every parent, so the entry Secret under Certificate.cert-manager.io has no effect; keep one of them`},
		{"a lifecycle kind listed twice", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nlifecycle:\n- apiGroup: apps\n  kind: ReplicaSet\n  order: [ObservedGenerationCurrent]\n- apiGroup: apps\n  kind: ReplicaSet\n  order: [\"Condition=Ready\"]\n",
			`line 8: lifecycle[1].kind: ReplicaSet.apps is listed twice`},
		{"wrong kind", "apiVersion: kausality.io/v1alpha1\nkind: Config\n", `line 2: kind: must be "ProxyConfiguration", not "Config"`},
		{"not yaml", "apiVersion: [\n", "not valid YAML"},
		{"wrong type", "apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers: 5\n", "line 3: cannot unmarshal !!int `5` into []config.Controller"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestWatcherReloadsAndKeepsLastGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(valid)
	w, err := NewWatcher(path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	dc := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:deployment-controller"}
	if c := w.Current().ControllerFor(dc, ""); c == nil || c.Mode != annotations.ModeShadow {
		t.Fatalf("initial: %+v", c)
	}

	write(strings.Replace(valid, "mode: shadow", "mode: enforce", 1))
	w.Check()
	if c := w.Current().ControllerFor(dc, ""); c == nil || c.Mode != annotations.ModeEnforce || w.Reloads() != 1 {
		t.Fatalf("after reload: %+v reloads=%d", c, w.Reloads())
	}

	write(strings.Replace(valid, "mode: shadow", "mode: bogus", 1))
	w.Check()
	if c := w.Current().ControllerFor(dc, ""); c == nil || c.Mode != annotations.ModeEnforce || w.Failures() != 1 {
		t.Fatalf("an invalid reload must keep the last good config: %+v failures=%d", c, w.Failures())
	}
}

func TestNewWatcherRefusesInvalidFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: a\n  match: {user: x}\n  mode: nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := NewWatcher(path, 0, nil)
	if err == nil || !strings.Contains(err.Error(), path+": line 6: controllers[0].mode") {
		t.Fatalf("error %v", err)
	}
}

// The example in docs/ must always be valid.
func TestDocumentedExampleIsValid(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "config-example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data); err != nil {
		t.Fatal(err)
	}
}

// By default a renewal's rewrite of the Secret a cert-manager Certificate
// owns is an attempt, and any other controller's Secret is gated.
func TestDefaultUngatedChildKindsLeaveACertificatesSecretUngated(t *testing.T) {
	kinds := Default().UngatedChildKinds
	secret := schema.GroupKind{Kind: "Secret"}
	if _, ok := decision.UngatedBy(kinds, secret, schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}); !ok {
		t.Error("a Certificate's Secret is gated by default")
	}
	for _, parent := range []schema.GroupKind{{Group: "apps", Kind: "Deployment"}, {Group: "example.com", Kind: "Certificate"}} {
		if k, ok := decision.UngatedBy(kinds, secret, parent); ok {
			t.Errorf("a Secret under %s is ungated by default (%s)", parent, k)
		}
	}
}

func TestAChildKindMayBeUngatedUnderSeveralParentKinds(t *testing.T) {
	cfg, err := Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nungatedChildKinds:\n" +
		"- kind: Secret\n  parent: {apiGroup: cert-manager.io, kind: Certificate}\n" +
		"- kind: Secret\n  parent: {apiGroup: example.com, kind: Vault}\n" +
		"- kind: Secret\n  apiGroup: example.com\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.UngatedChildKinds) != 3 {
		t.Fatalf("ungated child kinds %v, want all three entries", cfg.UngatedChildKinds)
	}
}

func TestDefaultUngatedChildKindsDoNotOverlap(t *testing.T) {
	for i, k := range DefaultUngatedChildKinds {
		if j, ok := overlapping(DefaultUngatedChildKinds[:i], k); ok {
			t.Errorf("default %d: %s", i, overlapProblem(k, j, DefaultUngatedChildKinds[j]))
		}
	}
}
