package intercept_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kausality-io/kausality-proxy/intercept/policy"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// The interceptor authorizes a write before it does anything for it: a
// caller who may not write gets kube-apiserver's 403, nothing is read from
// the store, nothing is forwarded, nothing is written.
func TestWritesAreAuthorizedBeforeAnyWork(t *testing.T) {
	write := benchWrites()[1] // the controller's update of a ReplicaSet
	cases := []struct {
		name          string
		allow         func(authorizationv1.SubjectAccessReviewSpec) (bool, error)
		wantCode      int
		wantMessage   string
		wantForwarded int64
		wantReviews   int64
	}{
		{
			name:          "allowed for the namespace: one review, forwarded",
			allow:         func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil },
			wantCode:      http.StatusOK,
			wantForwarded: 1,
			wantReviews:   1,
		},
		{
			name: "allowed for this object only (resourceNames): two reviews, forwarded",
			allow: func(s authorizationv1.SubjectAccessReviewSpec) (bool, error) {
				return s.ResourceAttributes.Name == "web-1", nil
			},
			wantCode:      http.StatusOK,
			wantForwarded: 1,
			wantReviews:   2,
		},
		{
			name:     "denied: kube-apiserver's 403, nothing else",
			allow:    func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return false, nil },
			wantCode: http.StatusForbidden,
			wantMessage: `replicasets.apps "web-1" is forbidden: User "system:serviceaccount:kube-system:replicaset-controller" ` +
				`cannot update resource "replicasets" in API group "apps" in the namespace "apps"`,
			wantReviews: 2,
		},
		{
			name: "the review fails: 503, nothing else",
			allow: func(authorizationv1.SubjectAccessReviewSpec) (bool, error) {
				return false, errors.New("connection refused")
			},
			wantCode:    http.StatusServiceUnavailable,
			wantMessage: "SubjectAccessReview failed",
			wantReviews: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, tc.allow)
			before := len(env.dyn.Actions())
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, write))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (%v)", rec.Code, tc.wantCode, env.lastError)
			}
			if tc.wantMessage != "" {
				var status apierrors.APIStatus
				if !errors.As(env.lastError, &status) || !strings.Contains(status.Status().Message, tc.wantMessage) {
					t.Fatalf("error %v, want %q", env.lastError, tc.wantMessage)
				}
			}
			if got := env.forwarded.Load(); got != tc.wantForwarded {
				t.Errorf("forwarded %d, want %d", got, tc.wantForwarded)
			}
			// A forwarded write of the parent's controller, told from
			// managedFields, also asks beside it whether the writer may
			// write Deployments' status (they are then watched): after the
			// write's own reviews, never before.
			want := tc.wantReviews
			if tc.wantForwarded > 0 {
				want++
			}
			testutil.Eventually(t, 10*time.Second, "the review beside the write answered", func() error {
				if env.interceptor.KindChecksPending() {
					return errors.New("still asking")
				}
				return nil
			})
			// The reviews may retry a failed call; count the distinct ones.
			if got := env.reviews.Load(); got < want || (tc.wantCode != http.StatusServiceUnavailable && got != want) {
				t.Errorf("reviews %d, want %d", got, want)
			}
			if tc.wantForwarded == 0 {
				if got := env.dyn.Actions()[before:]; len(got) != 0 {
					t.Errorf("the store was used for a write that was not authorized: %v", got)
				}
			}
		})
	}
}

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
