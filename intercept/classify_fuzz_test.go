package intercept

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/endpoints/request"
)

// Any method, path and query kube-apiserver's request info accepts is
// classified without a panic; a read is never intercepted, and anything
// classified as a write is a write kube-apiserver would see as one.
func FuzzClassify(f *testing.F) {
	for _, seed := range []struct{ method, path, ua string }{
		{"POST", "/apis/apps/v1/namespaces/prod/replicasets?fieldManager=x&dryRun=All", "kube-controller-manager/v1.35.4"},
		{"PATCH", "/api/v1/namespaces/prod/configmaps/c?fieldManager=a&fieldManager=b", "kubectl/v1.35"},
		{"DELETE", "/api/v1/namespaces/prod/pods", ""},
		{"POST", "/api/v1/namespaces/prod/pods/p/eviction", ""},
		{"PUT", "/apis/apps/v1/namespaces/prod/deployments/web/scale", ""},
		{"GET", "/api/v1/namespaces/prod/pods?watch=true", ""},
		{"PUT", "/apis/example.com/v1/widgets/w/status", ""},
		{"POST", "/api/v1/namespaces/../secrets", ""},
		{"PATCH", "/api/v1/namespaces/prod/CONFIGMAPS/c", ""},
	} {
		f.Add(seed.method, seed.path, seed.ua)
	}
	i := New(Config{})
	f.Fuzz(func(t *testing.T, method, target, userAgent string) {
		if !strings.HasPrefix(target, "/") {
			return
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		r, err := http.NewRequest(method, u.String(), nil)
		if err != nil {
			return
		}
		r.Header.Set("User-Agent", userAgent)
		info, err := infoFactory.NewRequestInfo(r)
		if err != nil {
			return
		}
		r = r.WithContext(request.WithRequestInfo(r.Context(), info))
		w, ok := i.classify(r)
		if !ok {
			return
		}
		switch info.Verb {
		case "get", "list", "watch", "proxy", "connect":
			t.Fatalf("a %s was classified as a write: %+v", info.Verb, w)
		}
		if !info.IsResourceRequest {
			t.Fatalf("a non-resource request was classified as a write: %s %s", method, target)
		}
	})
}
