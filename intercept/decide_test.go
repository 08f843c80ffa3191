package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// The confirmation reads of the drift path are independent: the live read
// of the parent does not wait for kube-apiserver's dry run of the write,
// nor the dry run for the parent.
func TestConfirmationReadsRunTogether(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	parentRead := make(chan struct{})
	var once sync.Once
	env := newServeEnv(t, nil, allowAll, enforce, func(s *serveSetup) {
		s.reactors = append(s.reactors, reactor{verb: "get", resource: "deployments", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
			once.Do(func() { close(parentRead) })
			return false, nil, nil
		}})
	})
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("dryRun") != "" {
			select {
			case <-parentRead:
			case <-time.After(10 * time.Second):
				t.Error("the dry run waited for the live read of the parent, or the parent was not read")
			}
		}
		echoDryRun(w, r)
	}
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, driftWrite("stable-1", "stable", "stable-uid")))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("code %d, want the drift held (error %v)", rec.Code, env.lastError)
	}
}

// Drift told from a child's cached metadata is confirmed at once: the
// live read of the child runs with kube-apiserver's dry run of the write,
// not in a round of its own before it.
func TestDriftFromMetadataReadsTheChildWithTheDryRun(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	dryRun := make(chan struct{})
	var once sync.Once
	env := newServeEnv(t, nil, allowAll, enforce, replicaSetsAsChildren, func(s *serveSetup) {
		s.reactors = append(s.reactors, reactor{verb: "get", resource: "replicasets", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
			select {
			case <-dryRun:
			case <-time.After(10 * time.Second):
				t.Error("the live read of the child did not run with the dry run")
			}
			return false, nil, nil
		}})
	})
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("dryRun") != "" {
			once.Do(func() { close(dryRun) })
		}
		echoDryRun(w, r)
	}
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, driftWrite("stable-1", "stable", "stable-uid")))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("code %d, want the drift held (error %v)", rec.Code, env.lastError)
	}
}

// countingAllowances has no allowance policies, and counts how often a
// write asks for them.
type countingAllowances struct{ asked atomic.Int64 }

func (c *countingAllowances) All() []*allowance.Compiled     { c.asked.Add(1); return nil }
func (c *countingAllowances) Report([]allowance.EvalProblem) {}
func (c *countingAllowances) HasSynced() bool                { return true }

// withNamespaceAllowanceMode turns allowances on for the namespace "apps".
func withNamespaceAllowanceMode(mode string) serveOption {
	return func(s *serveSetup) {
		for _, o := range s.objects {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "Namespace" {
				u.SetAnnotations(map[string]string{annotations.AllowanceMode: mode})
			}
		}
	}
}

// TestAllowancePoliciesReadOnlyWhenChecked: allowances are opt-in, and a
// write where no allowance mode is on (neither on the object, its parent
// nor its namespace) does not read the AllowancePolicies at all.
func TestAllowancePoliciesReadOnlyWhenChecked(t *testing.T) {
	cases := []struct {
		name      string
		opts      []serveOption
		wantAsked bool
	}{
		{name: "no allowance mode anywhere: the policies are not read"},
		{name: "the namespace checks allowances: the policies are read", opts: []serveOption{withNamespaceAllowanceMode("shadow")}, wantAsked: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			policies := &countingAllowances{}
			opts := append([]serveOption{func(s *serveSetup) { s.config.AllowancePolicies = policies }}, tc.opts...)
			env := newServeEnv(t, nil, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }, opts...)
			env.upstream = echoDryRun
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, driftWrite("web-1", "web", "web-uid")))
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d, want 200 for the controller's expected write (error %v)", rec.Code, env.lastError)
			}
			if asked := policies.asked.Load() > 0; asked != tc.wantAsked {
				t.Errorf("the write read the allowance policies: %v, want %v", asked, tc.wantAsked)
			}
		})
	}
}
