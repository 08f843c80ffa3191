package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kube-apiserver's namespaces/finalize strategy (namespaceFinalizeStrategy:
// PrepareForUpdate resets only the status, ValidateNamespaceFinalizeUpdate
// only the immutable metadata) stores the metadata of the body, annotations
// included, like the status strategy does: whoever may update
// namespaces/finalize (kube-controller-manager's namespace-controller,
// which may not update namespaces) must not lower every child's namespace
// mode from enforce to log through it.
func TestANamespaceFinalizeIsGuardedAsAStatusWrite(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	ns := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"apps","resourceVersion":"1","annotations":{"kausality.io/mode":"log","kausality.io/allowance-mode":"shadow"}},"spec":{"finalizers":[]}}`
	for _, sub := range []string{"status", "finalize"} {
		t.Run(sub, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, func(s *serveSetup) {
				s.objects[0].(*unstructured.Unstructured).SetAnnotations(map[string]string{"kausality.io/mode": "enforce", "kausality.io/allowance-mode": "enforce"})
			})
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut, path: "/api/v1/namespaces/apps/" + sub,
				contentType: "application/json", body: []byte(ns), user: "system:serviceaccount:kube-system:namespace-controller"}))
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != http.StatusForbidden || len(sent) != 0 {
				t.Fatalf("a Namespace %s write lowering kausality.io/mode went upstream (code %d, %d forwarded: %v); want it refused as a status write is",
					sub, rec.Code, len(sent), sent)
			}
		})
	}
}

// kube-apiserver's certificatesigningrequests/approval strategy
// (csrApprovalStrategy: PrepareForUpdate keeps the stored spec and status
// but the conditions) stores the metadata of the body too: whoever may
// approve certificates must not change a CSR's kausality annotations
// through it. An approval that leaves them alone goes upstream.
func TestACertificateApprovalIsGuardedAsAStatusWrite(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	csrs := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "certificatesigningrequests"}
	withCSR := func(s *serveSetup) {
		s.resources = append(s.resources, servedResource{gvr: csrs, listKind: "CertificateSigningRequestList",
			resource: metav1.APIResource{Name: "certificatesigningrequests", Namespaced: false, Kind: "CertificateSigningRequest",
				Verbs: metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}}})
		s.objects = append(s.objects, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
			"metadata": map[string]any{"name": "csr-1", "uid": "csr-uid", "resourceVersion": "9", "annotations": map[string]any{"kausality.io/mode": "enforce"}},
			"spec":     map[string]any{"signerName": "example.com/signer", "request": "cmVx", "usages": []any{"client auth"}},
		}})
	}
	approval := func(mode string) []byte {
		return []byte(`{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":"csr-1","resourceVersion":"9","annotations":{"kausality.io/mode":"` + mode + `"}},` +
			`"spec":{"signerName":"example.com/signer","request":"cmVx","usages":["client auth"]},"status":{"conditions":[{"type":"Approved","status":"True","reason":"ok"}]}}`)
	}
	for _, tc := range []struct {
		name, mode string
		wantCode   int
	}{
		{name: "an approval lowering the mode", mode: "log", wantCode: http.StatusForbidden},
		{name: "an approval that keeps the annotations", mode: "enforce", wantCode: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, withCSR)
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut, path: "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval",
				contentType: "application/json", body: approval(tc.mode), user: "system:serviceaccount:kube-system:certificate-controller"}))
			mu.Lock()
			defer mu.Unlock()
			wantSent := 0
			if tc.wantCode == http.StatusOK {
				wantSent = 1
			}
			if rec.Code != tc.wantCode || len(sent) != wantSent {
				t.Fatalf("code %d with %d forwarded (%v), want %d with %d", rec.Code, len(sent), env.lastError, tc.wantCode, wantSent)
			}
		})
	}
}
