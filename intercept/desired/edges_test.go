package desired

import "testing"

// A NetworkPolicy peer that gains `namespaceSelector: {}` now selects the
// matching pods in every namespace instead of only its own: kube-apiserver
// stores the empty selector (a pointer field), and it means "all namespaces".
// It is not the same as no selector.
func TestAnEmptySelectorIsAChange(t *testing.T) {
	old := fromJSON(t, `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"np","namespace":"default"},
 "spec":{"podSelector":{"matchLabels":{"app":"db"}},"ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"web"}}}]}]}}`)
	new := fromJSON(t, `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"np","namespace":"default"},
 "spec":{"podSelector":{"matchLabels":{"app":"db"}},"ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"web"}},"namespaceSelector":{}}]}]}}`)
	if r := Diff(old, new); !r.Changed {
		t.Errorf("adding namespaceSelector: {} (all namespaces) is a desired-state change; Diff says none")
	}
	// policy/v1 PodDisruptionBudget: a null selector selects nothing, an
	// empty one every pod of the namespace.
	pdbOld := fromJSON(t, `{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"p","namespace":"default"},"spec":{"maxUnavailable":0}}`)
	pdbNew := fromJSON(t, `{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"p","namespace":"default"},"spec":{"maxUnavailable":0,"selector":{}}}`)
	if r := Diff(pdbOld, pdbNew); !r.Changed {
		t.Errorf("a PDB selector from null (no pods) to {} (every pod) is a desired-state change; Diff says none")
	}
}

// A ConfigMap has no spec; a body that carries an (ignored, pruned) "spec"
// member must not make Diff compare only spec.
func TestASpecMemberDoesNotHideADataChange(t *testing.T) {
	old := fromJSON(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"default"},"data":{"k":"v1"}}`)
	new := fromJSON(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"default"},"spec":null,"data":{"k":"v2"}}`)
	if r := Diff(old, new); !r.Changed {
		t.Errorf("data.k v1 -> v2 is a desired-state change; a null spec member hides it")
	}
}

// Two int64s above 2^53 share a float64; they compare exactly.
func TestLargeIntegersCompareExactly(t *testing.T) {
	old := fromJSON(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"id":9007199254740992}}`)
	new := fromJSON(t, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"id":9007199254740993}}`)
	if r := Diff(old, new); !r.Changed {
		t.Errorf("spec.id 9007199254740992 -> 9007199254740993 is a change; Diff says none")
	}
}
