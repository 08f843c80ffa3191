package intercept

import (
	"context"

	"github.com/kausality-io/kausality-proxy/intercept/reservations"
)

// SettleOrphans runs one look for orphaned approval reservations now,
// instead of waiting for the periodic one.
func SettleOrphans(ctx context.Context, i *Interceptor) { i.approvals.SettleOrphans(ctx) }

// Reservations is the interceptor's store of reservation records.
func (i *Interceptor) Reservations() *reservations.Store { return i.cfg.Reservations }
