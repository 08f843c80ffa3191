package intercept

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"
)

// A write with a reserved once approval is not processed by kube-apiserver
// past the proxy's own deadline for it: the approval's settlement counts
// on that.
func TestBoundedAtUpstream(t *testing.T) {
	i := &Interceptor{cfg: Config{RequestTimeout: time.Minute}}
	for _, tc := range []struct {
		name     string
		query    string
		deadline time.Duration // 0: none
		want     string
	}{
		{name: "no deadline: the proxy's request timeout", want: "60s"},
		{name: "what is left of the request's deadline, rounded down", deadline: 20*time.Second + 500*time.Millisecond, want: "20s"},
		{name: "a deadline further than the request timeout", deadline: 5 * time.Minute, want: "60s"},
		{name: "a deadline almost over: at least a second", deadline: 100 * time.Millisecond, want: "1s"},
		{name: "the caller's own shorter timeout stays", query: "timeout=5s", want: "5s"},
		{name: "the caller's longer timeout is cut", query: "timeout=10m", deadline: 30*time.Second + 500*time.Millisecond, want: "30s"},
		{name: "a timeout that is no duration is replaced", query: "timeout=soon", want: "60s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("PUT", "/apis/apps/v1/namespaces/apps/replicasets/web-1?fieldManager=m&"+tc.query, nil)
			if tc.deadline > 0 {
				ctx, cancel := context.WithTimeout(r.Context(), tc.deadline)
				defer cancel()
				r = r.WithContext(ctx)
			}
			out := i.boundedAtUpstream(r)
			if got := out.URL.Query().Get("timeout"); got != tc.want {
				t.Errorf("timeout %q, want %q", got, tc.want)
			}
			if got := out.URL.Query().Get("fieldManager"); got != "m" {
				t.Errorf("the caller's other parameters were lost: fieldManager %q", got)
			}
			if tc.query == "" && r.URL.Query().Has("timeout") {
				t.Errorf("the caller's request was changed in place")
			}
		})
	}
}
