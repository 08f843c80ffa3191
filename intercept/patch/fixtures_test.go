package patch

import (
	"encoding/json"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/internal/testfixtures"
)

// testDeployment is the shared Deployment fixture.
func testDeployment() *appsv1.Deployment { return testfixtures.Deployment() }

func ptr[T any](v T) *T { return &v }

// currentDeployment is testDeployment as stored: with uid and
// resourceVersion, as unstructured.
func currentDeployment(t testing.TB) *unstructured.Unstructured {
	t.Helper()
	d := testDeployment()
	d.UID = "5e0c4a3e-0000-4000-8000-000000000001"
	d.ResourceVersion = "12345"
	d.Generation = 4
	return toUnstructured(t, d)
}

func toUnstructured(t testing.TB, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func jsonOf(t testing.TB, v interface{}) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func nested(t testing.TB, u *unstructured.Unstructured, path ...string) interface{} {
	t.Helper()
	v, _, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantStatus(t *testing.T, err error, code int32, reason metav1.StatusReason, msg string) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not an *apierrors.StatusError", err, err)
	}
	if se.ErrStatus.Code != code || se.ErrStatus.Reason != reason {
		t.Errorf("got code %d reason %q, want %d %q (message %q)", se.ErrStatus.Code, se.ErrStatus.Reason, code, reason, se.ErrStatus.Message)
	}
	if se.ErrStatus.Message != msg {
		t.Errorf("message:\n got: %s\nwant: %s", se.ErrStatus.Message, msg)
	}
}
