package intercept

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/body"
)

// A write with any dryRun parameter changes nothing in kube-apiserver: it
// is a dry run when every value is "All", and refused (422) otherwise. The
// proxy treats it as a dry run either way, so it reserves no once approval
// for a write that will never land. A DELETE with a body takes its options
// from the body alone, as kube-apiserver does.
func TestDryRunAsKubeAPIServerReadsIt(t *testing.T) {
	i := New(Config{})
	cases := []struct {
		name, method, target, body string
		want                       bool
	}{
		{"dryRun=All", "PATCH", "/api/v1/namespaces/prod/configmaps/c?dryRun=All", "", true},
		{"lower-case dryRun=all: refused by kube-apiserver", "PATCH", "/api/v1/namespaces/prod/configmaps/c?dryRun=all", "", true},
		{"dryRun=All and an empty dryRun: refused by kube-apiserver", "PUT", "/api/v1/namespaces/prod/configmaps/c?dryRun=All&dryRun=", "", true},
		{"an empty dryRun then dryRun=All", "POST", "/api/v1/namespaces/prod/configmaps?dryRun=&dryRun=All", "", true},
		{"no dryRun", "PATCH", "/api/v1/namespaces/prod/configmaps/c", "", false},
		{"a dryrun parameter in another spelling is ignored by kube-apiserver", "PATCH", "/api/v1/namespaces/prod/configmaps/c?dryrun=All", "", false},
		{"delete without a body: the query counts", "DELETE", "/api/v1/namespaces/prod/configmaps/c?dryRun=All", "", true},
		{"delete without a body: an invalid value counts", "DELETE", "/api/v1/namespaces/prod/configmaps/c?dryRun=None", "", true},
		{"delete with a body: the query does not count", "DELETE", "/api/v1/namespaces/prod/configmaps/c?dryRun=All", `{"kind":"DeleteOptions","apiVersion":"v1"}`, false},
		{"delete with a body asking for a dry run", "DELETE", "/api/v1/namespaces/prod/configmaps/c", `{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}`, true},
		{"delete with a body and an invalid dryRun", "DELETE", "/api/v1/namespaces/prod/configmaps/c", `{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["all"]}`, true},
		{"eviction with an invalid dryRun in its options", "POST", "/api/v1/namespaces/prod/pods/p/eviction",
			`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p"},"deleteOptions":{"dryRun":["none"]}}`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := requestFor(t, tc.method, tc.target, "")
			r.Body = httptest.NewRequest(tc.method, tc.target, bytes.NewReader([]byte(tc.body))).Body
			r.Header.Set("Content-Type", "application/json")
			w, ok := i.classify(r)
			if !ok {
				t.Fatal("not intercepted")
			}
			dry := w.dryRun
			if body, err := deleteDryRun(r, w, []byte(tc.body)); err != nil {
				t.Fatal(err)
			} else if body {
				dry = true
			}
			if dry != tc.want {
				t.Fatalf("dry run %v, want %v", dry, tc.want)
			}
		})
	}
}

// An eviction's dryRun is read from its body in every format kube-apiserver
// takes (and a DELETE's from DeleteOptions in every format): a dry run the
// proxy did not see would reserve and spend a once approval.
func TestEvictionDryRunInEveryFormat(t *testing.T) {
	eviction := func(dryRun ...string) *unstructured.Unstructured {
		e := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policy/v1", "kind": "Eviction",
			"metadata": map[string]any{"name": "p", "namespace": "prod"},
		}}
		if dryRun != nil {
			values := make([]any, len(dryRun))
			for k, v := range dryRun {
				values[k] = v
			}
			e.Object["deleteOptions"] = map[string]any{"dryRun": values}
		}
		return e
	}
	encode := func(obj *unstructured.Unstructured, format body.Format) []byte {
		data, _, err := body.Encode(obj, format)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	deleteOptions := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "dryRun": []any{"All"}}}
	const evictionPath = "/api/v1/namespaces/prod/pods/p/eviction"
	cases := []struct {
		name, method, target, contentType string
		body                              []byte
		want                              bool
		wantCode                          int32
	}{
		{"JSON", "POST", evictionPath, "application/json", encode(eviction("All"), body.JSON), true, 0},
		{"YAML", "POST", evictionPath, "application/yaml", encode(eviction("All"), body.YAML), true, 0},
		{"protobuf", "POST", evictionPath, "application/vnd.kubernetes.protobuf", encode(eviction("All"), body.Protobuf), true, 0},
		{"CBOR", "POST", evictionPath, "application/cbor", encode(eviction("All"), body.CBOR), true, 0},
		{"YAML without apiVersion and kind", "POST", evictionPath, "application/yaml", []byte("metadata:\n  name: p\ndeleteOptions:\n  dryRun: [All]\n"), true, 0},
		{"policy/v1beta1", "POST", evictionPath, "application/yaml", []byte("apiVersion: policy/v1beta1\nkind: Eviction\nmetadata:\n  name: p\ndeleteOptions:\n  dryRun: [All]\n"), true, 0},
		{"protobuf without dryRun", "POST", evictionPath, "application/vnd.kubernetes.protobuf", encode(eviction(), body.Protobuf), false, 0},
		{"YAML without dryRun", "POST", evictionPath, "application/yaml", encode(eviction(), body.YAML), false, 0},
		{"YAML that is not YAML", "POST", evictionPath, "application/yaml", []byte("deleteOptions: [\n"), false, http.StatusBadRequest},
		{"dryRun that is not a list", "POST", evictionPath, "application/json", []byte(`{"apiVersion":"policy/v1","kind":"Eviction","deleteOptions":{"dryRun":"All"}}`), false, http.StatusBadRequest},
		{"another kind", "POST", evictionPath, "application/json", []byte(`{"apiVersion":"v1","kind":"Pod"}`), false, http.StatusBadRequest},
		{"an unknown format", "POST", evictionPath, "text/plain", []byte("dryRun"), false, http.StatusUnsupportedMediaType},
		{"a DELETE with CBOR DeleteOptions", "DELETE", "/api/v1/namespaces/prod/configmaps/c", "application/cbor", encode(deleteOptions, body.CBOR), true, 0},
		{"a DELETE with YAML DeleteOptions", "DELETE", "/api/v1/namespaces/prod/configmaps/c", "application/yaml", []byte("apiVersion: v1\nkind: DeleteOptions\ndryRun: [All]\n"), true, 0},
	}
	i := New(Config{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := requestFor(t, tc.method, tc.target, "")
			r.Header.Set("Content-Type", tc.contentType)
			w, ok := i.classify(r)
			if !ok {
				t.Fatal("not intercepted")
			}
			got, err := deleteDryRun(r, w, tc.body)
			if tc.wantCode != 0 {
				var status apierrors.APIStatus
				if !errors.As(err, &status) || status.Status().Code != tc.wantCode || status.Status().Message == "" {
					t.Fatalf("error %v, want a %d Status", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("dry run %v, want %v", got, tc.want)
			}
		})
	}
}
