package kubectlplugin

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// The plugin explains a write as the proxy decides it: an object whose
// controller reference names itself has no parent to approve on.
func TestParentOf(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	owned := func(refs ...metav1.OwnerReference) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apps/v1")
		u.SetKind("ReplicaSet")
		u.SetNamespace("apps")
		u.SetName("web-1")
		u.SetUID("rs-uid")
		u.SetOwnerReferences(refs)
		return u
	}
	ref := func(name, uid string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: types.UID(uid), Controller: ptr.To(controller)}
	}
	c := &cluster{mapper: mapper}
	for _, tc := range []struct {
		name       string
		child      *unstructured.Unstructured
		wantParent string
	}{
		{name: "its controller", child: owned(ref("web", "web-uid", true)), wantParent: "web"},
		{name: "an owner that is no controller", child: owned(ref("web", "web-uid", false))},
		{name: "no owner", child: owned()},
		{name: "itself as its controller", child: owned(ref("web-1", "rs-uid", true))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := c.parentOf(tc.child)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tc.wantParent != "") || ok && got.name != tc.wantParent {
				t.Fatalf("parent %q (found: %v), want %q", got.name, ok, tc.wantParent)
			}
		})
	}
}

// A cluster-scoped parent's children may be in any namespace: the
// approvals and rejections the plugin writes for one name its namespace,
// and those for a namespaced parent's child name none.
func TestApprovalsOfAClusterScopedParentsChildNameItsNamespace(t *testing.T) {
	child := decision.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team-a", Name: "cfg"}
	parent := func(namespace string) *unstructured.Unstructured {
		p := &unstructured.Unstructured{}
		p.SetAPIVersion("example.com/v1")
		p.SetKind("Widget")
		p.SetName("w")
		p.SetNamespace(namespace)
		p.SetGeneration(4)
		return p
	}
	for _, tc := range []struct {
		parentNamespace, want string
	}{
		{"", `"namespace":"team-a"`},
		{"team-a", ""},
	} {
		approve, err := approveEdit(child, parent(tc.parentNamespace), annotations.ApprovalOnce, annotations.Stamp{})
		if err != nil {
			t.Fatal(err)
		}
		reject, err := rejectEdit(child, parent(tc.parentNamespace), "no", false, annotations.Stamp{})
		if err != nil {
			t.Fatal(err)
		}
		row := DriftRow{Parent: decision.ObjectRef{Namespace: tc.parentNamespace}, Child: child, ParentGeneration: 4}
		for what, value := range map[string]string{"approval": approve.Set[annotations.Approvals], "rejection": reject.Set[annotations.Rejections]} {
			if named := strings.Contains(value, `"namespace":`); named != (tc.want != "") || tc.want != "" && !strings.Contains(value, tc.want) {
				t.Errorf("parent namespace %q: %s %s, want namespace %q", tc.parentNamespace, what, value, tc.want)
			}
		}
		if got := row.Approval().Namespace; (got != "") != (tc.want != "") {
			t.Errorf("parent namespace %q: the drift's approval names namespace %q", tc.parentNamespace, got)
		}
	}
}
