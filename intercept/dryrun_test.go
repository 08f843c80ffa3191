package intercept

import (
	"bytes"
	"net/http/httptest"
	"testing"
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
