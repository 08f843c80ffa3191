//go:build hardening

package hardening

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
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
	return framework.TestKind{Group: group, Version: version, Kind: "Rig", Plural: "rigs", Scope: apiextensionsv1.NamespaceScoped,
		Spec: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}, Status: true}.CRD()
}

func tallyCRD() *apiextensionsv1.CustomResourceDefinition {
	return framework.TestKind{Group: group, Version: version, Kind: "Tally", Plural: "tallies", Scope: apiextensionsv1.NamespaceScoped,
		Spec: map[string]apiextensionsv1.JSONSchemaProps{
			// created is the marker of the create that made it.
			"created": {Type: "string"},
			// count is incremented by every applied update.
			"count": {Type: "integer"},
			// keys holds the marker of every applied update.
			"keys": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{
				Schema: &apiextensionsv1.JSONSchemaProps{Type: "boolean"},
			}},
		}}.CRD()
}
