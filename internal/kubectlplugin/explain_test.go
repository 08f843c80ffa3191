package kubectlplugin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

const deployCtrl = "system:serviceaccount:kube-system:deployment-controller"

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func obj(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatalf("fixture: %v\n%s", err, s)
	}
	return u
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// deployment is a parent fixture: settled (kstatus Current) unless busy,
// with extra annotations.
func deployment(t *testing.T, busy bool, ann map[string]string) *unstructured.Unstructured {
	t.Helper()
	replicas := 2
	if busy {
		replicas = 3 // a person scaled its ReplicaSet: "Pending termination"
	}
	a := map[string]string{annotations.Phase: annotations.PhaseInitialized}
	for k, v := range ann {
		a[k] = v
	}
	ab, _ := json.Marshal(a)
	return obj(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"demo","uid":"d-1","generation":4,"resourceVersion":"100","annotations":`+string(ab)+`},
	"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"pause"}]}}},
	"status":{"observedGeneration":4,"replicas":`+itoa(replicas)+`,"updatedReplicas":`+itoa(replicas)+`,"readyReplicas":`+itoa(replicas)+`,"availableReplicas":`+itoa(replicas)+`,
	"conditions":[{"type":"Available","status":"True"},{"type":"Progressing","status":"True","reason":"NewReplicaSetAvailable"}]}}`)
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

const traceTwoHops = `[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":1,"user":"alice","timestamp":"2026-02-28T09:00:00Z"},{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":1,"user":"` + deployCtrl + `","timestamp":"2026-02-28T09:00:01Z","labels":{"ticket":"OPS-7"}}]`

func replicaSet(t *testing.T, traceValue string, owned bool) *unstructured.Unstructured {
	t.Helper()
	owner := ""
	if owned {
		owner = `,"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"d-1","controller":true}]`
	}
	return obj(t, `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web-6d4","namespace":"demo","generation":2,"annotations":{"kausality.io/trace":`+jsonString(traceValue)+`}`+owner+`},
	"spec":{"replicas":3},"status":{"replicas":3}}`)
}

func TestWhyGolden(t *testing.T) {
	record := map[string]string{annotations.Controllers: controllerid.Hash(deployCtrl)}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range record {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	personTrace := `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":2,"user":"bob","timestamp":"2026-03-01T11:59:00Z"}]`
	tests := []struct {
		name string
		f    func(t *testing.T) Facts
	}{
		{"drift-held", func(t *testing.T) Facts {
			return Facts{Child: replicaSet(t, personTrace, true), Parent: deployment(t, false, record), NamespaceMode: "enforce"}
		}},
		{"configured-ungated-kind", func(t *testing.T) Facts {
			// The same drift as drift-held, with the proxy configured to
			// leave ReplicaSets ungated: traced, not held.
			return Facts{Child: replicaSet(t, personTrace, true), Parent: deployment(t, false, record), NamespaceMode: "enforce",
				UngatedKinds:  []decision.UngatedKind{{Child: schema.GroupKind{Kind: "Pod"}}, {Child: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}}},
				UngatedSource: "ConfigMap kausality-system/kausality-proxy-config"}
		}},
		{"configured-ungated-under-its-parent-kind", func(t *testing.T) Facts {
			// ReplicaSets ungated under Deployments only: this one is.
			return Facts{Child: replicaSet(t, personTrace, true), Parent: deployment(t, false, record), NamespaceMode: "enforce",
				UngatedKinds: []decision.UngatedKind{{Child: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"},
					Parent: schema.GroupKind{Group: "apps", Kind: "Deployment"}}},
				UngatedSource: "ConfigMap kausality-system/kausality-proxy-config"}
		}},
		{"configured-ungated-under-another-parent-kind", func(t *testing.T) Facts {
			// ReplicaSets ungated under another kind of parent: this one
			// is gated.
			return Facts{Child: replicaSet(t, personTrace, true), Parent: deployment(t, false, record), NamespaceMode: "enforce",
				UngatedKinds: []decision.UngatedKind{{Child: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"},
					Parent: schema.GroupKind{Group: "example.com", Kind: "Rollout"}}},
				UngatedSource: "ConfigMap kausality-system/kausality-proxy-config"}
		}},
		{"drift-parent-looks-busy", func(t *testing.T) Facts {
			return Facts{Child: replicaSet(t, personTrace, true), Parent: deployment(t, true, record), NamespaceMode: "enforce"}
		}},
		{"approved-once", func(t *testing.T) Facts {
			return Facts{Child: replicaSet(t, traceTwoHops, true), NamespaceMode: "enforce", Parent: deployment(t, false, with(map[string]string{
				annotations.Approvals: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":4,"mode":"once","user":"carol","at":"2026-03-01T11:59:30Z"},{"apiVersion":"v1","kind":"ConfigMap","name":"other","mode":"always"},{"kind":"broken"}]`,
			}))}
		}},
		{"approval-given-by-its-controller", func(t *testing.T) Facts {
			// The controller wrote an approval for itself before its
			// status writes named it: it approves none of its drift.
			entry := `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","mode":"always"}`
			return Facts{Child: replicaSet(t, traceTwoHops, true), NamespaceMode: "enforce", Parent: deployment(t, false, with(map[string]string{
				annotations.Approvals:   "[" + entry + "]",
				annotations.ApprovalsBy: controllerid.LongHash(deployCtrl) + ":" + annotations.EntryDigest(json.RawMessage(entry)),
			}))}
		}},
		{"rejected-beats-approval", func(t *testing.T) Facts {
			return Facts{Child: replicaSet(t, traceTwoHops, true), Parent: deployment(t, false, with(map[string]string{
				annotations.Approvals:  `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","mode":"always"}]`,
				annotations.Rejections: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","reason":"needs SRE review","user":"dave"}]`,
				annotations.Mode:       "log",
			}))}
		}},
		{"frozen-and-snoozed", func(t *testing.T) Facts {
			return Facts{Child: replicaSet(t, traceTwoHops, true), NamespaceUnknown: true, Parent: deployment(t, false, with(map[string]string{
				annotations.Freeze:      `{"user":"carol","reason":"incident 42","at":"2026-03-01T11:00:00Z"}`,
				annotations.SnoozeUntil: "2026-03-01T14:00:00Z",
				annotations.Snooze:      `{"expiry":"2026-03-01T14:00:00Z","user":"carol","message":"known"}`,
			}))}
		}},
		{"controller-name-unknown", func(t *testing.T) Facts {
			return Facts{Child: replicaSet(t, personTrace, true), NamespaceMode: "enforce",
				Parent: deployment(t, false, map[string]string{annotations.Controllers: controllerid.Hash("system:serviceaccount:ops:my-operator")})}
		}},
		{"controller-not-known-yet", func(t *testing.T) Facts {
			return Facts{Child: replicaSet(t, traceTwoHops, true), Parent: deployment(t, false, nil), DefaultMode: annotations.ModeEnforce}
		}},
		{"no-parent", func(t *testing.T) Facts {
			return Facts{Child: replicaSet(t, personTrace, false)}
		}},
		{"approved-by-policy-one-rule-broken", func(t *testing.T) Facts {
			pol := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "kausality.io/v1alpha1", "kind": "ClusterApprovalPolicy",
				"metadata": map[string]any{"name": "deployment-controller", "uid": "p1", "generation": int64(1)},
				"spec": map[string]any{"serviceAccounts": []any{map[string]any{"namespace": "kube-system", "name": "deployment-controller"}}, "rules": []any{
					map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "mode": "always", "prereqs": map[string]any{"cel": "object.spec.("}},
					map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "*", "name": "web-*", "mode": "always"},
				}},
			}}
			return Facts{Child: replicaSet(t, personTrace, true), Parent: deployment(t, false, record), NamespaceMode: "enforce",
				PoliciesFor: func(string) ([]*unstructured.Unstructured, error) { return []*unstructured.Unstructured{pol}, nil }}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.f(t)
			f.Now = now
			if f.DefaultMode == "" {
				f.DefaultMode = annotations.ModeLog
			}
			if f.UngatedKinds == nil {
				f.UngatedKinds, f.UngatedSource = config.DefaultUngatedChildKinds, "the defaults"
			}
			var buf bytes.Buffer
			RenderWhy(&buf, Explain(f), "replicaset/web-6d4")
			golden(t, "why-"+tt.name, buf.String())
		})
	}
}

// The verdicts are the decision engine's, and the approval the plugin
// suggests is the one the proxy's denial carries.
func TestWhyVerdicts(t *testing.T) {
	record := map[string]string{annotations.Controllers: controllerid.Hash(deployCtrl)}
	child := replicaSet(t, "", true)
	ex := Explain(Facts{Child: child, Parent: deployment(t, false, record), NamespaceMode: "enforce", Now: now})
	if ex.Controller.User != deployCtrl || ex.Controller.Method != controllerid.MethodStatusWriters {
		t.Errorf("controller %+v", ex.Controller)
	}
	v := ex.Verdict
	if v.Result != decision.Deny || v.Category != decision.DriftUnapproved || ex.IfRemembered != nil {
		t.Fatalf("verdict %+v, if remembered %+v", v, ex.IfRemembered)
	}
	if ex.Mode.Mode != annotations.ModeEnforce || ex.Mode.Source != decision.ModeFromNamespace {
		t.Errorf("mode %+v", ex.Mode)
	}
	if v.Suggested == nil || v.Suggested.Generation != 4 || v.Suggested.Name != "web-6d4" || v.Suggested.EffectiveMode() != annotations.ApprovalOnce {
		t.Errorf("suggested %+v", v.Suggested)
	}
	if len(v.Unblock) != 1 || v.Unblock[0].Field != "metadata.annotations["+annotations.Approvals+"]" {
		t.Fatalf("unblock %+v", v.Unblock)
	}
	// What `approve` writes admits exactly that write.
	e, err := annotations.AddApproval("", *v.Suggested, annotations.Stamp{User: "carol", At: now})
	if err != nil {
		t.Fatal(err)
	}
	ann := map[string]string{annotations.Approvals: e.Set[annotations.Approvals]}
	for k, v := range record {
		ann[k] = v
	}
	ex = Explain(Facts{Child: child, Parent: deployment(t, false, ann), NamespaceMode: "enforce", Now: now})
	if ex.Verdict.Category != decision.DriftApproved || !ex.Verdict.Consumes {
		t.Errorf("after approve: %+v", ex.Verdict)
	}
}

func TestTraceGolden(t *testing.T) {
	three := strings.TrimSuffix(traceTwoHops, "]") + `,{"apiVersion":"v1","kind":"Pod","name":"web-6d4-x1","generation":0,"user":"system:serviceaccount:kube-system:replicaset-controller","timestamp":"2026-02-28T09:00:02Z"}]`
	tests := []struct{ name, value string }{
		{"empty", ""},
		{"one-hop", `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":2,"user":"bob","timestamp":"2026-03-01T11:59:00Z"}]`},
		{"three-hops", three},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := trace.Parse(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			RenderTrace(&buf, decision.ObjectRef{APIVersion: "v1", Kind: "Pod", Namespace: "demo", Name: "web-6d4-x1"}, tr)
			golden(t, "trace-"+tt.name, buf.String())
		})
	}
}

// `why` reads the parent's allowance mode as the proxy does for its
// controller: one the controller lowered itself gives way to the value
// before it.
func TestWhyReadsTheAllowanceModeAsTheProxyDoesForTheController(t *testing.T) {
	ann := map[string]string{
		annotations.Controllers:   controllerid.LongHash(deployCtrl),
		annotations.AllowanceMode: "shadow",
		annotations.ModesBy: "allowance-mode=" + controllerid.LongHash(deployCtrl) + ":" + annotations.Digest([]byte("shadow")) + ":" +
			base64.RawURLEncoding.EncodeToString([]byte("enforce")),
	}
	ex := Explain(Facts{Child: replicaSet(t, "", true), Parent: deployment(t, true, ann), NamespaceMode: "enforce", Now: now})
	if ex.Allowances == nil {
		t.Fatal("no allowance explanation")
	}
	if m := ex.Allowances.Mode; m.Mode != allowance.ModeEnforce || !strings.Contains(m.Warning, "made by the parent's own controller") {
		t.Errorf("allowance mode %s from %q (warning %q), want enforce, the value before the controller's shadow", m.Mode, m.Source, m.Warning)
	}
}
