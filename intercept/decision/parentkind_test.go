package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

func TestWatchesParentKind(t *testing.T) {
	parent := func(ann map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("Pod")
		u.SetName("driver")
		u.SetUID("pod-uid")
		u.SetAnnotations(ann)
		return u
	}
	recorded := Actor{IsController: true, Determined: true, Method: controllerid.MethodStatusWriters}
	for _, tc := range []struct {
		name   string
		actor  Actor
		parent *unstructured.Unstructured
		want   bool
		result Result
	}{
		{"the recorded controller (the record can be written at kube-apiserver directly)", recorded, parent(nil), true, Allow},
		{"the recorded controller, denied (drift in enforce mode)", recorded, parent(nil), true, Deny},
		{"a controller told from managedFields (its field manager can be sent by anyone)",
			Actor{IsController: true, Determined: true, Method: controllerid.MethodManagedFields}, parent(nil), true, Allow},
		{"another writer under a parent whose controller is told from managedFields",
			Actor{Determined: true, Method: controllerid.MethodManagedFields}, parent(nil), false, Allow},
		{"another writer under a recorded controller", Actor{Determined: true, Method: controllerid.MethodStatusWriters}, parent(nil), false, Allow},
		{"a parent whose controller is not known", Actor{}, parent(nil), false, Allow},
		{"a parent that carries allowances, any writer", Actor{}, parent(map[string]string{annotations.Allowances: `[{"kind":"ReplicaSet"}]`}), true, Allow},
		{"a parent that carries allowances, its recorded controller", recorded, parent(map[string]string{annotations.Allowances: `[{"kind":"ReplicaSet"}]`}), true, Allow},
		{"an empty allowances annotation", Actor{}, parent(map[string]string{annotations.Allowances: ""}), false, Allow},
		{"other annotations of the proxy", Actor{}, parent(map[string]string{annotations.Controllers: "abc", annotations.Trace: "[]"}), false, Allow},
		{"no parent", recorded, nil, false, Allow},
		{"a parent without a uid (gone)", recorded, func() *unstructured.Unstructured { p := parent(nil); p.SetUID(""); return p }(), false, Allow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Decision{Actor: tc.actor, Result: tc.result}
			if got := WatchesParentKind(d, tc.parent); got != tc.want {
				t.Fatalf("WatchesParentKind = %v, want %v", got, tc.want)
			}
		})
	}
	if WatchesParentKind(nil, parent(nil)) {
		t.Fatal("no decision watches a kind")
	}
}
