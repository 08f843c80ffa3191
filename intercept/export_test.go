package intercept

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/reservations"
)

// SettleOrphans runs one look for orphaned approval reservations now,
// instead of waiting for the periodic one.
func SettleOrphans(ctx context.Context, i *Interceptor) { i.approvals.SettleOrphans(ctx) }

// Reservations is the interceptor's store of reservation records.
func (i *Interceptor) Reservations() *reservations.Store { return i.cfg.Reservations }

// LearnsParentKind reports whether the settledness memory learns from
// objects of kind gk.
func (i *Interceptor) LearnsParentKind(gk schema.GroupKind) bool { return i.settled.Learns(gk) }

// KindChecksPending reports whether a review of a controller's access to
// its parent's status is still being asked.
func (i *Interceptor) KindChecksPending() bool {
	pending := false
	i.kindChecks.Range(func(any, any) bool { pending = true; return false })
	return pending
}

// HoldKindCheck makes a review of whether user may write the status of
// gk's objects look in flight until the returned function is called.
func (i *Interceptor) HoldKindCheck(gk schema.GroupKind, user string) (release func()) {
	check := kindCheck{kind: gk, user: user}
	i.kindChecks.Store(check, true)
	return func() { i.kindChecks.Delete(check) }
}
