package kubectlplugin

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// Generation 5 of the Deployment fixture is a person's image update with a
// ticket, not carried out yet; generation 3 was a scale, long settled.
const deploymentAllowances = `[` +
	`{"kind":"ReplicaSet","mutation":"create","generation":5,"initiator":"alice","policy":"deployment-image-with-ticket","trace":[{"kind":"Deployment","name":"web","generation":5,"field":"spec.template.spec.containers[0].image","attestations":{"metadata.annotations[jira]":"INFRA-23232"}}]},` +
	`{"kind":"ReplicaSet","mutation":"spec.replicas","generation":3,"initiator":"bob","policy":"kube-controller-manager-deployment-scale","trace":[{"kind":"Deployment","name":"web","generation":3,"field":"spec.replicas"}]},` +
	`{"kind":"ReplicaSet","mutation":"spec.replicas","generation":5,"initiator":"alice","policy":"deployment-image-with-ticket","trace":[{"kind":"Deployment","name":"web","generation":5,"field":"spec.template.spec.containers[0].image","attestations":{"metadata.annotations[jira]":"INFRA-23232"}}]},` +
	`{"kind":"ReplicaSet","mutation":"spec.future","generation":5,"policy":"p","trace":[],"since":"v9"}` +
	`]`

const replicaSetAllowances = `[{"kind":"Pod","mutation":"create","generation":1,"initiator":"alice","policy":"kube-controller-manager-replicaset",` +
	`"trace":[{"kind":"Deployment","name":"web","generation":5,"field":"spec.template.spec.containers[0].image","attestations":{"metadata.annotations[jira]":"INFRA-23232"}},{"kind":"ReplicaSet","name":"web-7f9","generation":1,"field":"spec.replicas"}]},` +
	`{"kind":"Pod","mutation":"delete","generation":1,"initiator":"carol","policy":"kube-controller-manager-replicaset","trace":[{"kind":"Deployment","name":"api","generation":2,"field":"spec.replicas"},{"kind":"ReplicaSet","name":"web-7f9","generation":1,"field":"spec.replicas"}]}]`

// rolloutDeployment is at generation 5, observed but not done: kstatus says
// InProgress, so only the settledness record tells what it settled at.
func rolloutDeployment(t *testing.T, ann map[string]string) *unstructured.Unstructured {
	t.Helper()
	a := map[string]string{}
	for k, v := range ann {
		a[k] = v
	}
	u := obj(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"shop","uid":"d-1","generation":5},
	"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}},
	"status":{"observedGeneration":5,"replicas":4,"updatedReplicas":1,"readyReplicas":3,"availableReplicas":3,
	"conditions":[{"type":"Available","status":"True"},{"type":"Progressing","status":"True","reason":"ReplicaSetUpdated"}]}}`)
	u.SetAnnotations(a)
	return u
}

func childReplicaSet(t *testing.T, name, value string) *unstructured.Unstructured {
	t.Helper()
	u := obj(t, `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"`+name+`","namespace":"shop","uid":"rs-`+name+`","generation":1,
	"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"d-1","controller":true}]},
	"spec":{"replicas":1},"status":{"observedGeneration":1,"replicas":0}}`)
	u.SetAnnotations(map[string]string{allowance.Annotation: value})
	return u
}

// records answers as the proxy's settledness ConfigMap would.
func records(recs map[string]settle.Record, err string) func(*unstructured.Unstructured) SettlednessLookup {
	return func(o *unstructured.Unstructured) SettlednessLookup {
		l := SettlednessLookup{Source: "ConfigMap kausality-system/kausality-settledness." + o.GetNamespace(), Error: err}
		if r, ok := recs[string(o.GetUID())]; ok {
			l.Record = &r
		}
		return l
	}
}

func TestAllowancesGolden(t *testing.T) {
	settledAt4 := map[string]settle.Record{"d-1": {Settled: "old", SettledAt: 4, Current: "new", Since: 5}}
	enforce := map[string]string{annotations.AllowanceMode: "enforce"}
	tests := []struct {
		name   string
		output string
		f      func(t *testing.T) AllowanceFacts
	}{
		{"rollout", "", func(t *testing.T) AllowanceFacts {
			return AllowanceFacts{Object: rolloutDeployment(t, map[string]string{allowance.Annotation: deploymentAllowances}),
				NamespaceAnnotations: enforce, Settledness: records(settledAt4, ""),
				Children: []*unstructured.Unstructured{
					childReplicaSet(t, "web-7f9", replicaSetAllowances),
					childReplicaSet(t, "web-broken", `[{"kind":`),
					childReplicaSet(t, "web-none", ""),
				}}
		}},
		{"record-unreadable", "", func(t *testing.T) AllowanceFacts {
			return AllowanceFacts{Object: rolloutDeployment(t, map[string]string{allowance.Annotation: deploymentAllowances, annotations.AllowanceMode: "Log "}),
				NamespaceUnknown: true, Settledness: records(nil, `configmaps "kausality-settledness.shop" is forbidden`),
				ChildrenErrors: []string{"the ReplicaSet children of Deployment shop/web could not be listed: forbidden"}}
		}},
		{"oversized", "", func(t *testing.T) AllowanceFacts {
			big := `[` + strings.Repeat(`{"kind":"ReplicaSet","mutation":"spec.replicas","generation":5,"policy":"p","trace":[{"kind":"Deployment","name":"web","generation":5,"field":"spec.replicas"}]},`, 300)
			big = strings.TrimSuffix(big, ",") + `]`
			return AllowanceFacts{Object: rolloutDeployment(t, map[string]string{allowance.Annotation: big}),
				NamespaceAnnotations: map[string]string{annotations.AllowanceMode: "sometimes"}, Settledness: records(nil, ""),
				Children: []*unstructured.Unstructured{childReplicaSet(t, "web-7f9", replicaSetAllowances)}}
		}},
		{"none", "", func(t *testing.T) AllowanceFacts {
			return AllowanceFacts{Object: rolloutDeployment(t, nil), Settledness: records(nil, "")}
		}},
		{"json", "json", func(t *testing.T) AllowanceFacts {
			return AllowanceFacts{Object: rolloutDeployment(t, map[string]string{allowance.Annotation: deploymentAllowances}),
				NamespaceAnnotations: enforce, Settledness: records(settledAt4, ""),
				Children: []*unstructured.Unstructured{childReplicaSet(t, "web-7f9", replicaSetAllowances)}}
		}},
		{"yaml", "yaml", func(t *testing.T) AllowanceFacts {
			return AllowanceFacts{Object: rolloutDeployment(t, nil), Settledness: records(nil, "")}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ExplainAllowances(tt.f(t))
			var buf bytes.Buffer
			o := &options{out: &buf, output: tt.output}
			if err := o.print(r, func(w io.Writer) { RenderAllowances(w, r) }); err != nil {
				t.Fatal(err)
			}
			golden(t, "allowances-"+tt.name, buf.String())
		})
	}
}

// Consumption follows the proxy's judgement of settledness: settled now
// or by the record at the current spec consumes everything up to the
// object's generation; a record of an earlier settlement consumes up to
// that; no readable record leaves it unknown.
func TestAllowanceConsumption(t *testing.T) {
	dep := rolloutDeployment(t, map[string]string{allowance.Annotation: deploymentAllowances})
	hash := settle.SpecHash(dep)
	tests := []struct {
		name   string
		lookup SettlednessLookup
		want   []string
	}{
		{"settled at generation 4", SettlednessLookup{Record: &settle.Record{Settled: "old", SettledAt: 4, Current: hash, Since: 5}}, []string{"no", "yes", "no"}},
		{"settled at the current spec", SettlednessLookup{Record: &settle.Record{Settled: hash, SettledAt: 5, Current: hash, Since: 5}}, []string{"yes", "yes", "yes"}},
		{"never settled", SettlednessLookup{}, []string{"no", "no", "no"}},
		{"records unreadable", SettlednessLookup{Error: "forbidden"}, []string{"unknown", "unknown", "unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ExplainAllowances(AllowanceFacts{Object: dep, Settledness: func(*unstructured.Unstructured) SettlednessLookup { return tt.lookup }})
			var got []string
			for _, a := range r.Allowances {
				got = append(got, a.Consumed)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("consumed %v, want %v", got, tt.want)
			}
		})
	}
}
