package decision

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// A cluster-scoped parent's children may be in any namespace. An approval
// that names the namespace of the child it was written for approves that
// child only; the denial suggests one that names it.
func TestApprovalsOfAClusterScopedParentsChildrenNameTheirNamespace(t *testing.T) {
	clusterScoped := func(approvals string) Input {
		in := base()
		unstructured.RemoveNestedField(in.Parent.Object, "metadata", "namespace")
		if approvals != "" {
			setAnn(annotations.Approvals, approvals)(in.Parent)
		}
		return in
	}
	inDefault := `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","namespace":"default","generation":5,"mode":"generation"}]`
	inTeamB := `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","namespace":"team-b","generation":5,"mode":"generation"}]`
	anywhere := `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"generation"}]`
	for _, tc := range []struct {
		name, approvals string
		want            Category
	}{
		{"an approval of the child's namespace", inDefault, DriftApproved},
		{"an approval of a child of that name in another namespace", inTeamB, DriftUnapproved},
		{"an approval that names no namespace", anywhere, DriftApproved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(clusterScoped(tc.approvals))
			if d.Category != tc.want {
				t.Fatalf("decided %s (%s), want %s", d.Category, d.Reason, tc.want)
			}
			if tc.want == DriftUnapproved && (d.Suggested == nil || d.Suggested.Namespace != "default" ||
				!strings.Contains(d.Message, `"namespace":"default"`)) {
				t.Fatalf("suggested %+v in %q, want the approval to name the child's namespace", d.Suggested, d.Message)
			}
		})
	}
	// Under a namespaced parent, the suggestion names no namespace: its
	// children are all in its own.
	if d := Decide(base()); d.Suggested == nil || d.Suggested.Namespace != "" {
		t.Fatalf("under a namespaced parent, suggested %+v", d.Suggested)
	}
}
