package intercept

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
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
)

// A Binding assigns a pod to a node, and kube-apiserver copies the
// Binding's annotations onto the pod it binds. A Binding is no write the
// proxy decides, but through its annotations whoever may create bindings
// (the scheduler) would write a pod's kausality annotations undecided: a
// lower mode, a forged trace or controllers record. So a Binding of a pod
// the proxy decides about may carry none.

// bindingGVK is the kind of a Binding's body when it names none.
var bindingGVK = schema.GroupVersionKind{Version: "v1", Kind: "Binding"}

// isBinding reports whether info is the creation of a Binding: through
// pods/NAME/binding, or the bindings resource.
func isBinding(info *request.RequestInfo) bool {
	if info.Verb != "create" || info.APIGroup != "" {
		return false
	}
	return (info.Resource == "pods" && info.Subresource == "binding") || (info.Resource == "bindings" && info.Subresource == "")
}

// serveBinding forwards a Binding whose annotations name no kausality
// annotation, untouched, and refuses any other with nothing sent upstream.
func (i *Interceptor) serveBinding(w http.ResponseWriter, r *http.Request, info *request.RequestInfo, forward http.Handler, writeError ErrorWriter) {
	data, err := i.readInterceptedBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	binding, _, err := body.DecodeOfKind(r.Header.Get("Content-Type"), data, bindingGVK)
	if err != nil {
		writeError(w, err)
		return
	}
	var named []string
	for k := range binding.GetAnnotations() {
		if annotations.IsKausality(k) {
			named = append(named, k)
		}
	}
	if len(named) > 0 {
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
		writeError(w, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Details: &metav1.StatusDetails{Name: name, Kind: "pods", Causes: causes},
			Message: "kausality: a Binding may not carry " + strings.Join(named, ", ") + ": kube-apiserver copies a Binding's annotations onto the pod " +
				info.Namespace + "/" + name + ", and kausality annotations are written on the pod itself, where the proxy decides about them. " +
				"Bind the pod without them.",
		}})
		return
	}
	upstream.RestoreBody(r, data)
	forward.ServeHTTP(w, r)
}
