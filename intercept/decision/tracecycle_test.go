package decision

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/lifecycle"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
)

// kube-apiserver accepts an ownerReference that names the object itself
// (or a cycle of two objects that own each other). The proxy then takes
// the object as its own parent, and each write of it extends the trace it
// already has: the kausality.io/trace annotation the proxy writes grows by
// a hop per write, without bound, until kube-apiserver refuses the
// object's annotations (256 KiB) and every further write of its desired
// state through the proxy fails, a person's included.
func TestATraceAroundAnOwnershipCycleIsBounded(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]interface{}{
			"name": "loop", "namespace": "apps", "uid": "loop-uid", "resourceVersion": "1",
			"ownerReferences": []interface{}{map[string]interface{}{
				"apiVersion": "v1", "kind": "ConfigMap", "name": "loop", "uid": "loop-uid", "controller": true,
			}},
		},
		"data": map[string]interface{}{"n": "0"},
	}}
	const writes = 300
	for n := 1; n <= writes; n++ {
		written := obj.DeepCopy()
		written.Object["data"] = map[string]interface{}{"n": fmt.Sprint(n)}
		d := Decide(Input{
			Operation:      Update,
			OldObject:      obj,
			NewObject:      written,
			Parent:         obj, // the ownerReference names the object itself
			DesiredChanged: true,
			User:           &user.DefaultInfo{Name: "alice"},
			FieldManager:   "kubectl-edit",
			Lifecycle:      &lifecycle.Detector{},
			Mode:           ModeInputs{Default: annotations.ModeEnforce},
			Now:            time.Date(2026, 1, 1, 0, 0, n, 0, time.UTC),
		})
		if d.Result != Allow {
			t.Fatalf("write %d: %s %s", n, d.Result, d.Reason)
		}
		d.ChildAnnotations.Apply(written)
		obj = written
	}
	hops, err := trace.Parse(obj.GetAnnotations()[annotations.Trace])
	if err != nil {
		t.Fatal(err)
	}
	size := len(obj.GetAnnotations()[annotations.Trace])
	if len(hops) > 64 {
		t.Errorf("after %d writes by one person the trace holds %d hops (%d bytes): it grows by a hop per write", writes, len(hops), size)
	}
}
