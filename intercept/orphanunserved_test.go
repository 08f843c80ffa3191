package intercept_test

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/reservations"
)

// A replica died holding a reservation whose parent's kind is no longer
// served (its CustomResourceDefinition was removed, or the version the
// record names was dropped). The parent is gone with its kind: the record
// goes too, at the latest when orphans are given up (a day).
func TestAnOrphanWhoseParentKindIsNotServedIsGivenUp(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	client := recordsClient()
	clock := clocktesting.NewFakePassiveClock(start)
	env := newServeEnv(t, nil, allowAll, withApprovedFamily, enforce, withRecords(t, client, clock))
	dead := reservations.New(client, recordNamespace, "dead-replica", clock)
	if _, err := dead.Open(context.Background(), reservations.Reservation{
		Parent:    decision.ObjectRef{APIVersion: "widgets.example.com/v1beta1", Kind: "Widget", Namespace: "apps", Name: "w"},
		Approval:  approval.Approval{APIVersion: "v1", Kind: "ConfigMap", Name: "c", Generation: 1, Mode: approval.Once},
		Operation: decision.Update, Version: "v1", Resource: "configmaps", Namespace: "apps", Name: "c",
		Before: decision.StoredState{Exists: true, UID: "c-uid", ResourceVersion: "7"},
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if o, _ := env.interceptor.Reservations().Orphans(-time.Second); len(o) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch never showed the record")
		}
	}
	for _, after := range []time.Duration{intercept.DefaultReservationOrphanAge + time.Second, 25 * time.Hour, 30 * 24 * time.Hour} {
		clock.SetTime(start.Add(after))
		intercept.SettleOrphans(context.Background(), env.interceptor)
	}
	if n := recordCount(t, client); n != 0 {
		t.Errorf("%d reservation records left a month after their replica died: a record whose parent's kind is not served is never dropped", n)
	}
}
