package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// The test API group of the custom-resource scenarios: a cluster-scoped
// Widget (parent, with a status subresource) and a namespaced Gadget
// (child, spec only).
const (
	TestGroup   = "e2e.kausality.io"
	TestVersion = "v1"
)

var (
	// WidgetGVR is the cluster-scoped parent resource.
	WidgetGVR = schema.GroupVersionResource{Group: TestGroup, Version: TestVersion, Resource: "widgets"}
	// GadgetGVR is the namespaced child resource.
	GadgetGVR = schema.GroupVersionResource{Group: TestGroup, Version: TestVersion, Resource: "gadgets"}
	// SprocketGVR is a namespaced child resource with a scale subresource.
	SprocketGVR = schema.GroupVersionResource{Group: TestGroup, Version: TestVersion, Resource: "sprockets"}
)

// TestKind describes a custom resource kind of the scenarios.
type TestKind struct {
	Group, Version, Kind, Plural string
	Scope                        apiextensionsv1.ResourceScope
	// Spec holds the properties of spec.
	Spec map[string]apiextensionsv1.JSONSchemaProps
	// Status adds a status subresource with observedGeneration and
	// conditions, as a controller reports them.
	Status bool
}

// CRD returns the CustomResourceDefinition of k.
func (k TestKind) CRD() *apiextensionsv1.CustomResourceDefinition {
	props := map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: k.Spec}}
	version := apiextensionsv1.CustomResourceDefinitionVersion{Name: k.Version, Served: true, Storage: true}
	if k.Status {
		props["status"] = apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"observedGeneration": {Type: "integer", Format: "int64"},
			"conditions":         conditionsSchema(),
		}}
		version.Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
	}
	version.Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: k.Plural + "." + k.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group:    k.Group,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: k.Plural, Singular: strings.ToLower(k.Kind), Kind: k.Kind, ListKind: k.Kind + "List"},
			Scope:    k.Scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version},
		},
	}
}

// conditionsSchema is status.conditions as kstatus reads them.
func conditionsSchema() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "array",
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type:     "object",
			Required: []string{"type", "status"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"type":               {Type: "string"},
				"status":             {Type: "string"},
				"reason":             {Type: "string"},
				"message":            {Type: "string"},
				"lastTransitionTime": {Type: "string", Format: "date-time"},
				"observedGeneration": {Type: "integer", Format: "int64"},
			},
		}},
	}
}

// WidgetCRD is a cluster-scoped kind with spec.size/spec.color and a status
// subresource holding observedGeneration and conditions.
func WidgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return TestKind{Group: TestGroup, Version: TestVersion, Kind: "Widget", Plural: "widgets", Scope: apiextensionsv1.ClusterScoped,
		Spec: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}, "color": {Type: "string"}}, Status: true}.CRD()
}

// GadgetCRD is a namespaced kind with spec.value/spec.replicas and no
// subresources.
func GadgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return TestKind{Group: TestGroup, Version: TestVersion, Kind: "Gadget", Plural: "gadgets", Scope: apiextensionsv1.NamespaceScoped,
		Spec: map[string]apiextensionsv1.JSONSchemaProps{"value": {Type: "string"}, "replicas": {Type: "integer"}}}.CRD()
}

// SprocketCRD is a namespaced kind whose scale subresource keeps its
// replicas at spec.size, not spec.replicas (which it also has, meaning
// something else), with a status subresource.
func SprocketCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "sprockets." + TestGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: TestGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "sprockets", Singular: "sprocket", Kind: "Sprocket", ListKind: "SprocketList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: TestVersion, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.size", StatusReplicasPath: ".status.size"},
				},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size":     {Type: "integer", Format: "int32"},
							"replicas": {Type: "integer"},
						}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size": {Type: "integer", Format: "int32"},
						}},
					},
				}},
			}},
		},
	}
}

// PolicyCRDs are the proxy's own ApprovalPolicy, ClusterApprovalPolicy and
// AllowancePolicy CRDs, read from the manifests the deployment uses.
func PolicyCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	_, here, _, ok := goruntime.Caller(0)
	if !ok {
		return nil, errors.New("cannot locate the e2e framework's source")
	}
	dir := filepath.Join(filepath.Dir(here), "..", "..", "manifests", "base", "crds")
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range []string{"kausality.io_approvalpolicies.yaml", "kausality.io_clusterapprovalpolicies.yaml", "kausal.io_allowancepolicies.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// InstallCRDs creates the CRDs with cfg (an existing one is left as is),
// waits until each is Established and until discovery serves its resource.
func InstallCRDs(ctx context.Context, cfg *rest.Config, crds ...*apiextensionsv1.CustomResourceDefinition) error {
	c, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if _, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			established := false
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				last = "not Established yet"
				return false, nil
			}
			gv := crd.Spec.Group + "/" + crd.Spec.Versions[0].Name
			list, err := disc.ServerResourcesForGroupVersion(gv)
			if err != nil {
				last = fmt.Sprintf("discovery of %s: %v", gv, err)
				return false, nil
			}
			for _, r := range list.APIResources {
				if r.Name == crd.Spec.Names.Plural {
					return true, nil
				}
			}
			last = fmt.Sprintf("discovery of %s does not list %s yet", gv, crd.Spec.Names.Plural)
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s: %v (%s)", crd.Name, err, last)
		}
	}
	return nil
}
