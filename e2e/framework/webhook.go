package framework

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// AdmissionHook is a validating admission webhook on loopback that
// kube-apiserver calls for the writes of one namespace: tests use it to
// make kube-apiserver refuse, fail or hold a write after the proxy has
// forwarded it.
type AdmissionHook struct {
	server *httptest.Server
	client kubernetes.Interface
	name   string
}

// StartAdmissionHook serves decide and registers it, with failure policy
// Fail and the given timeout, for rules in namespace. decide may hold a
// request, or panic with http.ErrAbortHandler to break the call off.
// kube-apiserver picks the registration up moments later, from its own
// informer: callers probe until it is in force.
func StartAdmissionHook(ctx context.Context, client kubernetes.Interface, name, namespace string, timeoutSeconds int32,
	rules []admissionregistrationv1.RuleWithOperations, decide func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) (*AdmissionHook, error) {
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := decide(review.Request)
		resp.UID = review.Request.UID
		review.Request, review.Response = nil, resp
		_ = json.NewEncoder(w).Encode(&review)
	}))
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: name + ".e2e.kausality.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr.To(server.URL + "/validate"),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw}),
			},
			Rules:                   rules,
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(timeoutSeconds),
		}},
	}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
		server.Close()
		return nil, err
	}
	return &AdmissionHook{server: server, client: client, name: name}, nil
}

// Remove unregisters the webhook; kube-apiserver stops calling it moments
// later.
func (h *AdmissionHook) Remove() {
	_ = h.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), h.name, metav1.DeleteOptions{})
}

// Close unregisters the webhook and stops serving it.
func (h *AdmissionHook) Close() {
	h.Remove()
	h.server.Close()
}

// Allowed is an AdmissionResponse that admits the request.
func Allowed() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

// Denied is an AdmissionResponse that refuses the request with message.
func Denied(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: message, Code: http.StatusForbidden}}
}
