package intercept

import (
	"testing"
)

// BenchmarkClassifyNotIntercepted is what the interceptor costs a request
// it passes on: a read, and a write in a namespace excluded from
// interception.
func BenchmarkClassifyNotIntercepted(b *testing.B) {
	i := New(Config{})
	for _, tt := range []struct{ name, method, path string }{
		{"GET", "GET", "/api/v1/namespaces/prod/configmaps/c"},
		{"PATCH excluded namespace", "PATCH", "/apis/apps/v1/namespaces/kube-system/replicasets/r?fieldManager=kube-controller-manager"},
	} {
		r := requestFor(b, tt.method, tt.path, "kube-controller-manager/v1.35.4")
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := i.classify(r); ok {
					b.Fatal("intercepted")
				}
			}
		})
	}
}
