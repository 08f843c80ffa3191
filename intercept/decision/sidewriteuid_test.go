package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// A controller creates, under its Deployment "web", a child of the same
// kind with generateName "web" (self-similar kinds do this). The decision's
// Child ref takes the generateName as its name, so it equals the parent's
// ref, and a prune told apart from a write on the written object by its
// reference alone would name the CREATE body's uid, which kube-apiserver
// ignores, instead of the parent's. The prune then never lands.
func TestAParentPruneNamesTheParentsUIDWhateverTheChildIsCalled(t *testing.T) {
	in := base()
	in.Operation = Create
	in.OldObject = nil
	in.Child = ObjectRef{} // as intercept.input builds it for a POST: no name in the path
	in.Changes = nil
	in.NewObject = &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]interface{}{
			"generateName": "web", "namespace": "default", "uid": "set-by-the-client",
			"ownerReferences": []interface{}{map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "p-uid", "controller": true}},
		},
		"spec": map[string]interface{}{"replicas": int64(1)},
	}}
	obsGen(4)(in.Parent)
	setAnn(annotations.Approvals, `[{"apiVersion":"v1","kind":"ConfigMap","name":"cfg","generation":4,"mode":"once"}]`)(in.Parent)
	d := Decide(in)
	if d.Category != Expected || len(d.ParentWrites) != 1 {
		t.Fatalf("category %s, parent writes %+v; want Expected with one prune", d.Category, d.ParentWrites)
	}
	if got := d.ParentWrites[0].TargetUID; got != parentUID {
		t.Errorf("the prune of the parent's approvals names TargetUID %q, want the parent's %q", got, parentUID)
	}
}
