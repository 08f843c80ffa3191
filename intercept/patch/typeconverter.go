package patch

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations" //nolint:depguard // the built-in kinds' schemas for structured merge, not a client
	"k8s.io/client-go/kubernetes/scheme"   //nolint:depguard // the codec of the built-in kinds, not a client
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// NewBuiltinTypeConverter returns a TypeConverter that types built-in
// Kubernetes objects with the OpenAPI-derived schema client-go embeds (the
// same one kube-apiserver's own field manager uses, so lists and maps merge
// by their keys: containers by name, ports by containerPort+protocol, ...)
// and everything else (custom resources, aggregated APIs) with fallback. A
// nil fallback means managedfields.NewDeducedTypeConverter(); for custom
// resources with a schema, pass managedfields.NewTypeConverter built from
// the CRD's OpenAPI.
//
// The embedded schema is parsed once, on first use (a few hundred
// milliseconds and some tens of MB).
func NewBuiltinTypeConverter(fallback managedfields.TypeConverter) managedfields.TypeConverter {
	if fallback == nil {
		fallback = deducedTypeConverter
	}
	return &builtinTypeConverter{
		scheme:   scheme.Scheme,
		builtin:  applyconfigurations.NewTypeConverter(scheme.Scheme),
		fallback: fallback,
	}
}

// SchemaKnown reports whether the proxy has the schema of kind gvk (a
// built-in kind), which it merges server-side applies of as kube-apiserver
// does; any other kind's merge is made with a schema deduced from the
// objects.
func SchemaKnown(gvk schema.GroupVersionKind) bool { return scheme.Scheme.Recognizes(gvk) }

type builtinTypeConverter struct {
	scheme   *runtime.Scheme
	builtin  managedfields.TypeConverter
	fallback managedfields.TypeConverter
}

func (c *builtinTypeConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if c.scheme.Recognizes(obj.GetObjectKind().GroupVersionKind()) {
		return c.builtin.ObjectToTyped(obj, opts...)
	}
	return c.fallback.ObjectToTyped(obj, opts...)
}

func (c *builtinTypeConverter) TypedToObject(v *typed.TypedValue) (runtime.Object, error) {
	// Both produce an *unstructured.Unstructured from the value; the schema
	// plays no role in this direction.
	return c.builtin.TypedToObject(v)
}
