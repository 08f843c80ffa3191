package e2e

import (
	"context"
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
)

// TestAllowancePolicyCRD: kube-apiserver serves the AllowancePolicy CRD
// as shipped, stores the shipped policies for kube-controller-manager
// (which then compile), defaults relation to Child, and rejects what the
// schema rules out.
func TestAllowancePolicyCRD(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile("../manifests/base/crds/kausal.io_allowancepolicies.yaml")
	mustf(t, err, "reading the CRD")
	crd := &apiextensionsv1.CustomResourceDefinition{}
	mustf(t, yaml.UnmarshalStrict(raw, crd), "the CRD")
	mustf(t, framework.InstallCRDs(ctx, cluster.Direct(), crd), "installing the CRD")
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	policies := dyn.Resource(v1alpha1.AllowancePoliciesGVR)

	for _, got := range createShippedAllowancePolicies(t, "e2e-") {
		if c := allowance.Compile(got); !c.Valid() {
			t.Errorf("the stored %s does not compile: %v", got.GetName(), c.Problems)
		}
	}

	defaulted := policyObject(t, `apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: e2e-defaulted}
spec:
  match: {kind: Deployment, fields: [spec.replicas]}
  subjects: [{kind: User, name: alice, mayInitiate: true}]
  allow: [{kind: ReplicaSet, mutations: [spec.replicas]}]
`)
	got, err := policies.Create(ctx, defaulted, metav1.CreateOptions{})
	mustf(t, err, "creating a policy without relation")
	t.Cleanup(func() { _ = policies.Delete(context.Background(), got.GetName(), metav1.DeleteOptions{}) })
	allow, _, _ := unstructured.NestedSlice(got.Object, "spec", "allow")
	if len(allow) != 1 || allow[0].(map[string]any)["relation"] != v1alpha1.RelationChild {
		t.Errorf("relation was not defaulted to Child: %v", allow)
	}

	for name, doc := range map[string]string{
		"e2e-team-subject": `apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: e2e-team-subject}
spec:
  match: {kind: Deployment, fields: [spec.replicas]}
  subjects: [{kind: Team, name: a}]
  allow: [{kind: ReplicaSet, mutations: [spec.replicas]}]
`,
		"e2e-sibling": `apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: e2e-sibling}
spec:
  match: {kind: Deployment, fields: [spec.replicas]}
  subjects: [{kind: User, name: a}]
  allow: [{kind: ReplicaSet, relation: Sibling, mutations: [spec.replicas]}]
`,
		"e2e-no-fields": `apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: e2e-no-fields}
spec:
  match: {kind: Deployment, fields: []}
  subjects: [{kind: User, name: a}]
  allow: [{kind: ReplicaSet, mutations: [spec.replicas]}]
`,
	} {
		_, err := policies.Create(ctx, policyObject(t, doc), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: created or failed otherwise (%v), want the schema to reject it", name, err)
			_ = policies.Delete(ctx, name, metav1.DeleteOptions{})
		} else if !strings.Contains(err.Error(), "spec.") {
			t.Errorf("%s: the rejection names no field: %v", name, err)
		}
	}
}

func policyObject(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	mustf(t, err, "policy YAML")
	u := &unstructured.Unstructured{}
	mustf(t, u.UnmarshalJSON(js), "policy")
	return u
}
