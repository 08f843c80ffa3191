package patch

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// A patch that turns metadata into something other than an object names no
// name at all: kube-apiserver cannot decode the patched object and answers
// 422 Invalid (field "patch"). The proxy must not tell the caller that the
// patch "sets metadata.name, which does not match the name on the URL":
// the caller never wrote a name, and the message sends them looking for one.
func TestPatchThatMakesMetadataNoObjectIsNotANameMismatch(t *testing.T) {
	current := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]interface{}{"name": "web-1", "namespace": "apps", "resourceVersion": "200"},
		"spec":     map[string]interface{}{"replicas": int64(1)},
	}}
	ns := "apps"
	for _, tc := range []struct {
		name  string
		typ   types.PatchType
		patch string
	}{
		{"merge patch, a string", types.MergePatchType, `{"metadata":"x"}`},
		{"merge patch, a number", types.MergePatchType, `{"metadata":1}`},
		{"JSON patch, a string", types.JSONPatchType, `[{"op":"replace","path":"/metadata","value":"x"}]`},
		{"strategic merge patch, a string", types.StrategicMergePatchType, `{"metadata":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As Request.Apply calls it for the proxy's write path.
			_, err := Apply(tc.typ, current, []byte(tc.patch), Options{Name: "web-1", Namespace: &ns, SkipTypeCheck: true})
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("err %v, want a Status", err)
			}
			s := status.Status()
			if strings.Contains(s.Message, "metadata.name") {
				t.Errorf("%d %q: the patch names no name; the caller is told to fix one", s.Code, s.Message)
			}
			if tc.typ != types.StrategicMergePatchType && s.Code != http.StatusUnprocessableEntity {
				t.Errorf("code %d (%s), kube-apiserver answers 422 Invalid", s.Code, s.Reason)
			}
		})
	}
}
