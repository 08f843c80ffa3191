//go:build hardening

package hardening

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The kinds of the load: a Rig (parent, with a status its controller
// writes) owns Tallies (children). A Tally's spec is a ledger of its own:
// every write through the proxy adds one key and increments count, so what
// etcd holds says which writes were applied, and how often.
const (
	group   = "hardening.kausality.io"
	version = "v1"
)

var (
	rigGVR   = schema.GroupVersionResource{Group: group, Version: version, Resource: "rigs"}
	tallyGVR = schema.GroupVersionResource{Group: group, Version: version, Resource: "tallies"}
)

func rigCRD() *apiextensionsv1.CustomResourceDefinition {
	conditions := apiextensionsv1.JSONSchemaProps{
		Type: "array",
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type:     "object",
			Required: []string{"type", "status"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"type":               {Type: "string"},
				"status":             {Type: "string"},
				"reason":             {Type: "string"},
				"lastTransitionTime": {Type: "string", Format: "date-time"},
			},
		}},
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "rigs." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "rigs", Singular: "rig", Kind: "Rig", ListKind: "RigList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size": {Type: "integer"},
						}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"observedGeneration": {Type: "integer", Format: "int64"},
							"conditions":         conditions,
						}},
					},
				}},
			}},
		},
	}
}

func tallyCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "tallies." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "tallies", Singular: "tally", Kind: "Tally", ListKind: "TallyList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							// created is the marker of the create that made it.
							"created": {Type: "string"},
							// count is incremented by every applied update.
							"count": {Type: "integer"},
							// keys holds the marker of every applied update.
							"keys": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{
								Schema: &apiextensionsv1.JSONSchemaProps{Type: "boolean"},
							}},
						}},
					},
				}},
			}},
		},
	}
}
