package proxy

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/client-go/rest"
)

// BenchmarkForwardOverHTTP2 forwards a merge patch and a GET through the
// upstream handler, over HTTP/2 on both sides as client-go and
// kube-apiserver speak it, and reports the process's CPU per request
// (caller, proxy and upstream together): the frames and hand-offs between
// goroutines a request costs do not show in allocations.
func BenchmarkForwardOverHTTP2(b *testing.B) {
	answer := `{"kind":"ReplicaSet","apiVersion":"apps/v1","metadata":{"name":"pool-1"}` + strings.Repeat(" ", 1800) + `}`
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	backend.EnableHTTP2 = true
	backend.StartTLS()
	defer backend.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: backend.Certificate().Raw})
	up, err := newUpstream(&rest.Config{Host: backend.URL, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}, zap.NewNop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewUnstartedServer(genericapifilters.WithRequestInfo(up, newRequestInfoFactory()))
	front.EnableHTTP2 = true
	front.StartTLS()
	defer front.Close()
	client := front.Client()
	for _, tt := range []struct{ name, method, path, body string }{
		{"PATCH", http.MethodPatch, "/apis/apps/v1/namespaces/bench-pass/replicasets/pool-1", `{"metadata":{"annotations":{"a":"b"}}}`},
		{"GET", http.MethodGet, "/apis/apps/v1/namespaces/bench-pass/replicasets/pool-1", ""},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(tt.method, front.URL+tt.path, strings.NewReader(tt.body))
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-us/op")
		})
	}
}
