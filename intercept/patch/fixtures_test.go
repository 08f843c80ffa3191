package patch

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/internal/testfixtures"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// testDeployment is the shared Deployment fixture.
func testDeployment() *appsv1.Deployment { return testfixtures.Deployment() }

// currentDeployment is testDeployment as stored: with uid and
// resourceVersion, as unstructured.
func currentDeployment(t testing.TB) *unstructured.Unstructured {
	t.Helper()
	d := testDeployment()
	d.UID = "5e0c4a3e-0000-4000-8000-000000000001"
	d.ResourceVersion = "12345"
	d.Generation = 4
	return testutil.ToUnstructured(t, d)
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
