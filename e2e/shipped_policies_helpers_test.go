package e2e

import (
	"bytes"
	"context"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// createShippedAllowancePolicies creates the AllowancePolicies shipped for
// kube-controller-manager, their names prefixed so that other tests' copies
// do not collide, deleted when the test ends. It returns them as stored.
func createShippedAllowancePolicies(t *testing.T, prefix string) []*unstructured.Unstructured {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	policies := dyn.Resource(v1alpha1.AllowancePoliciesGVR)
	shipped, err := os.ReadFile("../manifests/allowances/kube-controller-manager.yaml")
	mustf(t, err, "reading the shipped policies")
	var stored []*unstructured.Unstructured
	for _, doc := range bytes.Split(shipped, []byte("\n---\n")) {
		u := policyObject(t, string(doc))
		u.SetName(prefix + u.GetName())
		got, err := policies.Create(context.Background(), u, metav1.CreateOptions{})
		mustf(t, err, "creating the shipped policy "+u.GetName())
		t.Cleanup(func() { _ = policies.Delete(context.Background(), got.GetName(), metav1.DeleteOptions{}) })
		stored = append(stored, got)
	}
	return stored
}
