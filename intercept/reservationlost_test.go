package intercept_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// The patch that takes the once approval off the parent is applied by
// kube-apiserver, but its answer is lost (a timeout). The write is
// refused; the approval must not be lost with it: either it is put back,
// or its record stays for the orphan settlement to put it back.
func TestAReservationWhoseAnswerIsLostIsSettledAsAnOrphan(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	client := recordsClient()
	clock := clocktesting.NewFakePassiveClock(start)
	env := newServeEnv(t, nil, allowAll, withApprovedFamily, enforce, withRecords(t, client, clock))
	env.upstream = answering(http.StatusOK)
	lost := false
	env.dyn.PrependReactor("patch", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if lost || !strings.Contains(string(p.GetPatch()), `"kausality.io/reservations":"kausality-reservation-`) {
			return false, nil, nil
		}
		lost = true
		if _, _, err := clienttesting.ObjectReaction(env.dyn.Tracker())(a); err != nil {
			t.Fatalf("applying the reservation: %v", err)
		}
		return true, nil, apierrors.NewTimeoutError("request timed out, the write may have been applied", 1)
	})
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, driftWrite("approved-1", "approved", "approved-uid")))
	if !lost {
		t.Fatal("the reservation patch was never sent")
	}
	if rec.Code < 500 {
		t.Fatalf("the write whose reservation is unknown was answered %d", rec.Code)
	}
	if n := recordCount(t, client); n != 1 {
		t.Fatalf("%d records of reservations, want the one whose patch may have been applied", n)
	}
	clock.SetTime(start.Add(intercept.DefaultReservationOrphanAge + time.Second))
	// The orphan settlement reads the records its replica's watch has
	// seen.
	testutil.Eventually(t, 10*time.Second, "the once approval put back by the orphan settlement", func() error {
		intercept.SettleOrphans(context.Background(), env.interceptor)
		parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := parent.GetAnnotations()[annotations.Approvals]; got != onceApproval {
			return fmt.Errorf("the write was refused (%d) and never applied; the parent's approvals are %q", rec.Code, got)
		}
		return nil
	})
}
