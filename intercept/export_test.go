package intercept

import "context"

// SettleOrphans runs one look for orphaned approval reservations now,
// instead of waiting for the periodic one.
func SettleOrphans(ctx context.Context, i *Interceptor) { i.settleOrphans(ctx) }
