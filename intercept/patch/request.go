package patch

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// Request is one PATCH request: its patch, and what its path and query
// add to it.
type Request struct {
	Type  types.PatchType
	Patch []byte
	// Kind, Name and Namespace are the object's, from the request's path
	// ("" namespace for cluster-scoped resources).
	Kind            schema.GroupVersionKind
	Name, Namespace string
	// FieldManager is the request's field manager: the one it names, or
	// the one kube-apiserver derives from its user agent.
	// FieldManagerNamed: the request named it.
	FieldManager      string
	FieldManagerNamed bool
	// Force is an apply's force parameter.
	Force *bool
}

// Apply is the object the request makes of stored (nil: it does not
// exist), as kube-apiserver's patch handler makes it.
func (r *Request) Apply(stored *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ns := r.Namespace
	// kube-apiserver type-checks the patched object itself; skipping our
	// copy of that check saves a third of a patch's cost.
	opts := Options{FieldManager: r.FieldManager, Kind: r.Kind, Name: r.Name, Namespace: &ns, SkipTypeCheck: true, Force: r.Force}
	switch {
	case r.Type == types.ApplyYAMLPatchType || r.Type == types.ApplyCBORPatchType:
		opts.TypeConverter = sharedBuiltinConverter()
	case !r.FieldManagerNamed:
		// kube-apiserver validates the fieldManager parameter, not the
		// manager it derives from the user agent.
		opts.FieldManager = ""
	}
	return Apply(r.Type, stored, r.Patch, opts)
}

// applyToScale is the Scale the request makes of scale, the one
// kube-apiserver serves for the stored object.
func (r *Request) applyToScale(scale *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ns := r.Namespace
	return Apply(r.Type, scale, r.Patch, Options{FieldManager: r.FieldManager, Kind: ScaleKind, Name: r.Name, Namespace: &ns, Force: r.Force})
}

// ScaleKind is the kind of the /scale subresource.
var ScaleKind = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}

// sharedBuiltinConverter types server-side apply of built-in kinds with the
// schema client-go embeds, parsed once, on the first apply: parsing it
// costs a few hundred milliseconds.
var sharedBuiltinConverter = sync.OnceValue(func() managedfields.TypeConverter { return NewBuiltinTypeConverter(nil) })

// FromStored is a write whose object is computed from the stored one: a
// PATCH, applied to it, or a write of its /scale, which writes the stored
// object's replicas field (HPA and kubectl scale become spec writes).
type FromStored struct {
	// Patch is the PATCH request; nil for a /scale PUT.
	Patch *Request
	// Scale: the write is of the /scale subresource. ReplicasPath is
	// where the stored object keeps the replicas its Scale shows, and
	// Sent a PUT's Scale.
	Scale        bool
	ReplicasPath string
	Sent         *unstructured.Unstructured
}

// Produce is the object the write makes of stored. A PATCH of /scale
// applies to the Scale kube-apiserver would serve for stored, owners of
// the replicas field included, so that apply conflicts match.
func (w *FromStored) Produce(stored *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	if !w.Scale {
		return w.Patch.Apply(stored)
	}
	scale := w.Sent
	if w.Patch != nil {
		current, err := desired.ScaleFromTarget(stored, w.ReplicasPath)
		if err != nil {
			return nil, err
		}
		if scale, err = w.Patch.applyToScale(current); err != nil {
			return nil, err
		}
	}
	return desired.ScaleToPath(scale, stored, w.ReplicasPath)
}
