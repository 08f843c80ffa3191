package intercept_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

// countingPolicies has no policies, and counts how often a write asks for
// them.
type countingPolicies struct{ asked atomic.Int64 }

func (c *countingPolicies) For(string) []*policy.Compiled { c.asked.Add(1); return nil }
func (c *countingPolicies) Report([]policy.EvalProblem)   {}

// TestPoliciesMatchedOncePerRequest: a drift verdict is decided again
// after its confirmation with kube-apiserver, and used to fetch and
// evaluate the writer's policies each time; one Matcher serves the whole
// request, so that one budget covers it and a write is evaluated once.
func TestPoliciesMatchedOncePerRequest(t *testing.T) {
	policies := &countingPolicies{}
	env := newServeEnv(t, nil, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }, enforce,
		func(s *serveSetup) { s.config.Policies = policies })
	env.upstream = echoDryRun
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, driftWrite("stable-1", "stable", "stable-uid")))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("code %d, want 403 for unapproved drift (error %v)", rec.Code, env.lastError)
	}
	if got := policies.asked.Load(); got != 1 {
		t.Errorf("the write asked for its policies %d times, want once", got)
	}
}
