// Package binding decides about Bindings, which the proxy does not decide
// as writes: a Binding assigns a pod to a node, and kube-apiserver copies
// the Binding's annotations onto the pod it binds. Through them whoever
// may create bindings (the scheduler) would write a pod's kausality
// annotations undecided: a lower mode, a forged trace or controllers
// record. So a Binding of a pod the proxy decides about may carry none.
package binding

import (
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
)

// defaultKind is the kind of a Binding's body when it names none.
var defaultKind = schema.GroupVersionKind{Version: "v1", Kind: "Binding"}

// Is reports whether info is the creation of a Binding: through
// pods/NAME/binding, or the bindings resource.
func Is(info *request.RequestInfo) bool {
	if info.Verb != "create" || info.APIGroup != "" {
		return false
	}
	return (info.Resource == "pods" && info.Subresource == "binding") || (info.Resource == "bindings" && info.Subresource == "")
}

// Refusal is why the Binding in data, of contentType, for the request
// info, may not go upstream: nil when it may, a 403 Status when it
// carries a kausality annotation, and the body's decoding error (400, 415)
// when it cannot be read.
func Refusal(info *request.RequestInfo, contentType string, data []byte) error {
	binding, _, err := body.DecodeOfKind(contentType, data, defaultKind)
	if err != nil {
		return err
	}
	var named []string
	for k := range binding.GetAnnotations() {
		if annotations.IsKausality(k) {
			named = append(named, k)
		}
	}
	if len(named) == 0 {
		return nil
	}
	slices.Sort(named)
	name := binding.GetName()
	if info.Subresource == "binding" {
		name = info.Name
	}
	causes := make([]metav1.StatusCause, 0, len(named))
	for _, k := range named {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeForbidden, Field: "metadata.annotations[" + k + "]",
			Message: "kube-apiserver would copy this annotation onto the pod"})
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Details: &metav1.StatusDetails{Name: name, Kind: "pods", Causes: causes},
		Message: "kausality: a Binding may not carry " + strings.Join(named, ", ") + ": kube-apiserver copies a Binding's annotations onto the pod " +
			info.Namespace + "/" + name + ", and kausality annotations are written on the pod itself, where the proxy decides about them. " +
			"Bind the pod without them.",
	}}
}
