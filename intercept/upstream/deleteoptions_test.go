package upstream

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// A single DELETE whose body has a Content-Type kube-apiserver cannot
// decode is a 415, and its message must be about that DELETE, not about a
// deletecollection the caller never sent.
func TestDeleteOptionsOfASingleDeleteSaysDelete(t *testing.T) {
	r := httptest.NewRequest(http.MethodDelete, "/apis/apps/v1/namespaces/apps/replicasets/web-1", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "text/plain")
	_, err := DeleteOptionsOf(r, []byte(`{}`))
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusUnsupportedMediaType {
		t.Fatalf("err %v, want a 415", err)
	}
	if msg := status.Status().Message; strings.Contains(msg, "deletecollection") {
		t.Errorf("a DELETE of one object is answered %q", msg)
	}
}
