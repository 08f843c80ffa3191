package intercept_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// A write the client sent without a resourceVersion never gets a 409 that
// kube-apiserver alone would not have given: when the precondition the
// proxy added fails, the write is decided again on fresh state.
func TestTheClientsContractOnConflicts(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	unconditional := func(child, parent, uid string, replicas int64) benchWrite {
		w := driftWrite(child, parent, uid)
		obj := benchChild(child, parent, uid, replicas)
		unstructured.RemoveNestedField(obj.Object, "metadata", "resourceVersion")
		w.body, _ = obj.MarshalJSON()
		return w
	}
	for _, tc := range []struct {
		name  string
		opts  []serveOption
		write benchWrite
		// conflicts: how many of the real writes kube-apiserver answers
		// 409 before it applies one (-1: every one).
		conflicts int
		wantCode  int
		// wantWrites: the real writes forwarded (dry runs aside).
		wantWrites   int64
		wantApproval bool
	}{
		{name: "an unconditional PUT whose object moved once: decided again and applied",
			write: unconditional("stable-1", "stable", "stable-uid", 1), conflicts: 1, wantCode: http.StatusOK, wantWrites: 2},
		{name: "an unconditional PUT whose object keeps moving: a retryable 429, never a 409",
			write: unconditional("stable-1", "stable", "stable-uid", 1), conflicts: -1, wantCode: http.StatusTooManyRequests, wantWrites: 3},
		{name: "the client's own resourceVersion: kube-apiserver's 409 is relayed",
			write: driftWrite("stable-1", "stable", "stable-uid"), opts: []serveOption{logMode}, conflicts: -1, wantCode: http.StatusConflict, wantWrites: 1},
		{name: "a once approval reserved for a write whose object moved: put back, reserved again, used once",
			opts:  []serveOption{withApprovedFamily},
			write: unconditional("approved-1", "approved", "approved-uid", 3), conflicts: 1, wantCode: http.StatusOK, wantWrites: 2},
		{name: "a once approval reserved for a write whose object keeps moving: back on the parent",
			opts:  []serveOption{withApprovedFamily},
			write: unconditional("approved-1", "approved", "approved-uid", 3), conflicts: -1, wantCode: http.StatusTooManyRequests, wantWrites: 3,
			wantApproval: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, append([]serveOption{enforce}, tc.opts...)...)
			var writes atomic.Int64
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("dryRun") != "" {
					echoDryRun(w, r)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				if n := writes.Add(1); tc.conflicts < 0 || n <= int64(tc.conflicts) {
					w.WriteHeader(http.StatusConflict)
					_, _ = w.Write([]byte(preconditionConflict))
					return
				}
				_, _ = w.Write([]byte(`{}`))
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, tc.write))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (error %v)", rec.Code, tc.wantCode, env.lastError)
			}
			if got := writes.Load(); got != tc.wantWrites {
				t.Errorf("%d writes forwarded, want %d", got, tc.wantWrites)
			}
			if tc.wantCode == http.StatusTooManyRequests {
				if rec.Header().Get("Retry-After") == "" || !apierrors.IsTooManyRequests(env.lastError) {
					t.Errorf("no retryable Status: %v %v", rec.Header(), env.lastError)
				}
			}
			if strings.Contains(rec.Body.String(), "the object has been modified") && tc.wantCode != http.StatusConflict {
				t.Errorf("a held 409 reached the client: %s", rec.Body)
			}
			if tc.opts == nil || tc.write.path != driftWrite("approved-1", "approved", "approved-uid").path {
				return
			}
			parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if has := parent.GetAnnotations()[annotations.Approvals] == onceApproval; has != tc.wantApproval {
				t.Errorf("approval on the parent afterwards: %v, want %v", has, tc.wantApproval)
			}
		})
	}
}

func logMode(s *serveSetup) { s.config.DefaultMode = annotations.ModeLog }
