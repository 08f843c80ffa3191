package intercept

import (
	"net/http"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
)

var scaleKind = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}

// scaledObject turns a /scale write into the write of spec.replicas on the
// scaled object it amounts to (HPA and kubectl scale become spec writes).
// A PATCH applies to the Scale the apiserver would serve for the stored
// object, owners of the replicas field included, so apply conflicts match.
func (i *Interceptor) scaledObject(r *http.Request, p *pending) (*unstructured.Unstructured, error) {
	var scale *unstructured.Unstructured
	if p.w.verb == "patch" {
		pt, err := patch.TypeFor(r.Header.Get("Content-Type"))
		if err != nil {
			return nil, err
		}
		current, err := desired.ScaleFromTarget(p.old, "")
		if err != nil {
			return nil, err
		}
		ns := p.namespace
		scale, err = patch.Apply(pt, current, p.data, patch.Options{FieldManager: p.w.fieldManager, Kind: scaleKind, Name: p.w.info.Name, Namespace: &ns})
		if err != nil {
			return nil, err
		}
	} else {
		var err error
		scale, _, err = body.Decode(r.Header.Get("Content-Type"), p.data, &scaleKind)
		if err != nil {
			return nil, err
		}
	}
	return desired.ScaleToSpec(scale, p.old)
}
