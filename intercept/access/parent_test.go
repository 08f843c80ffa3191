package access

import (
	"context"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// What is asked about a parent names its resource as discovery maps its
// kind, and the subresource of the question.
func TestQuestionsAboutAParent(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{{GroupVersion: "apps/v1",
		APIResources: []metav1.APIResource{{Name: "deployments", Namespaced: true, Kind: "Deployment", Verbs: metav1.Verbs{"get"}}}}}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var asked []authorizer.AttributesRecord
	c := &Checker{Objects: objects.New(ctx, disc, nil, nil), Authorizer: authorizer.AuthorizerFunc(
		func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			asked = append(asked, *a.(*authorizer.AttributesRecord))
			if a.GetVerb() == "get" {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		})}
	alice := &user.DefaultInfo{Name: "alice"}
	parent := &unstructured.Unstructured{}
	parent.SetAPIVersion("apps/v1")
	parent.SetKind("Deployment")
	parent.SetNamespace("prod")
	parent.SetName("web")

	if !c.MayGetParent(ctx, alice, parent) {
		t.Error("alice may not get the parent")
	}
	if c.MayWriteStatus(ctx, alice, parent, false) {
		t.Error("alice may write the parent's status")
	}
	if c.MayWriteStatus(ctx, alice, parent, true) {
		t.Error("alice may write the parent, whose status is in the object")
	}
	record := func(verb, subresource, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: alice, Verb: verb, Namespace: "prod", APIGroup: "apps", APIVersion: "v1",
			Resource: "deployments", Subresource: subresource, Name: name, ResourceRequest: true}
	}
	// The status of every Deployment of the namespace: a controller is
	// granted it so, and the answer serves its writes under any of them.
	// A kind whose status is written in the object: the object itself.
	if want := []authorizer.AttributesRecord{record("get", "", "web"), record("update", "status", ""), record("update", "", "")}; !reflect.DeepEqual(asked, want) {
		t.Errorf("asked %+v, want %+v", asked, want)
	}

	parent.SetKind("Unserved")
	if c.MayWriteStatus(ctx, alice, parent, false) || len(asked) != 3 {
		t.Error("a parent of a kind discovery does not map was asked about, or allowed")
	}
}
