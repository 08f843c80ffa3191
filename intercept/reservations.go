// What becomes of a reserved once approval when kube-apiserver has
// answered the write it was reserved for: it is spent by an applied write,
// put back after a refusal, and when the answer does not say (a 5xx, a
// broken connection, kube-apiserver restarting), what kube-apiserver
// stores decides. A write that provably did not land must not cost the
// person's approval; one that may have landed must not leave it usable.

package intercept

import (
	"context"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

const (
	// reservationSettleWindow bounds how long the proxy keeps trying to
	// read what kube-apiserver stores after an answer that did not say
	// whether the write landed; an outage longer than that leaves the
	// approval spent (and logged).
	reservationSettleWindow = 5 * time.Minute
	// maxSettlingReservations bounds the settlements waiting for
	// kube-apiserver in the background.
	maxSettlingReservations = 256
	// reservationFirstCheckTimeout bounds the read made before the caller
	// gets its answer: an unreachable kube-apiserver must not hold the
	// answer for long, the background retries take over.
	reservationFirstCheckTimeout = 2 * time.Second
)

// Outcomes of a reserved once approval, the values of the metric's label.
const (
	reservationUsed          = "used"
	reservationRestored      = "restored"
	reservationKept          = "kept"
	reservationUnsettled     = "unsettled"
	reservationRestoreFailed = "restore-failed"
)

// reservedWrite is a write a once approval was reserved for, with what the
// proxy read of its object before forwarding it.
type reservedWrite struct {
	approval  *decision.ApprovalsUpdate
	op        decision.Operation
	gvr       schema.GroupVersionResource
	namespace string
	// name is "" for a create that only has a generateName: there is
	// nothing to look for.
	name   string
	before decision.StoredState
}

// reservedWriteOf describes the write p for the settlement of upd.
func reservedWriteOf(p *pending, upd *decision.ApprovalsUpdate) reservedWrite {
	rw := reservedWrite{approval: upd, op: p.op, gvr: p.w.gvr, namespace: p.namespace, name: p.w.info.Name}
	if rw.name == "" && p.sent != nil {
		rw.name = p.sent.GetName()
	}
	if p.op != decision.Create && p.old != nil {
		rw.before = decision.StoredState{Exists: true, UID: string(p.old.GetUID()), ResourceVersion: p.old.GetResourceVersion()}
	}
	return rw
}

// settleReservation carries out what kube-apiserver's answer code means
// for the approval reserved for rw. A refusal restores the approval before
// the caller hears of it, so a client that retries at once finds it. An
// answer that does not say is settled by a read of the stored object, in
// the background when kube-apiserver cannot be read now.
func (i *Interceptor) settleReservation(rw reservedWrite, code int) {
	switch decision.OnWriteAnswer(code) {
	case decision.ApprovalUsed:
		i.metrics.reservation(reservationUsed)
	case decision.ApprovalRestore:
		i.restoreReservation(rw, "kube-apiserver refused the write")
	case decision.ApprovalCheckStored:
		ctx, cancel := context.WithTimeout(context.Background(), min(reservationFirstCheckTimeout, i.cfg.SideWriteTimeout))
		settled := i.checkStored(ctx, rw)
		cancel()
		if settled {
			return
		}
		select {
		case i.settling <- struct{}{}:
			go func() {
				defer func() { <-i.settling }()
				i.checkStoredUntilSettled(rw)
			}()
		default:
			i.unsettled(rw, "too many reservations are waiting for kube-apiserver")
		}
	}
}

// checkStored reads the object rw wrote and settles the approval from it.
// It reports false when the object could not be read.
func (i *Interceptor) checkStored(ctx context.Context, rw reservedWrite) bool {
	if rw.name == "" {
		i.metrics.reservation(reservationKept)
		i.reservationLog(rw).Warn("a once approval stays spent: the write it was reserved for got no clear answer, and a create without a name cannot be looked for")
		return true
	}
	live, err := i.cfg.Objects.GetLive(ctx, rw.gvr, rw.namespace, rw.name)
	after := decision.StoredState{}
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		i.reservationLog(rw).Info("cannot read the object of a write with no clear answer yet", zap.Error(err))
		return false
	default:
		after = decision.StoredState{Exists: true, UID: string(live.GetUID()), ResourceVersion: live.GetResourceVersion()}
	}
	if decision.WriteNotApplied(rw.op, rw.before, after) {
		i.restoreReservation(rw, "the write got no clear answer, and kube-apiserver still stores the object as it was")
		return true
	}
	i.metrics.reservation(reservationKept)
	i.reservationLog(rw).Warn("a once approval stays spent: the write it was reserved for got no clear answer, and the object changed, maybe by that write",
		zap.String("resourceVersionBefore", rw.before.ResourceVersion), zap.String("resourceVersionAfter", after.ResourceVersion))
	return true
}

// checkStoredUntilSettled retries checkStored with backoff while
// kube-apiserver cannot be read, for at most reservationSettleWindow.
func (i *Interceptor) checkStoredUntilSettled(rw reservedWrite) {
	ctx, cancel := context.WithTimeout(context.Background(), reservationSettleWindow)
	defer cancel()
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 20, Cap: 15 * time.Second}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		readCtx, readCancel := context.WithTimeout(ctx, i.cfg.SideWriteTimeout)
		defer readCancel()
		return i.checkStored(readCtx, rw), nil
	})
	if err != nil {
		i.unsettled(rw, "kube-apiserver could not be read for "+reservationSettleWindow.String())
	}
}

func (i *Interceptor) restoreReservation(rw reservedWrite, why string) {
	if i.restoreApproval(rw.approval) {
		i.metrics.reservation(reservationRestored)
		i.reservationLog(rw).Info("a reserved once approval is back on its parent: " + why)
		return
	}
	i.metrics.reservation(reservationRestoreFailed)
}

func (i *Interceptor) unsettled(rw reservedWrite, why string) {
	i.metrics.reservation(reservationUnsettled)
	i.reservationLog(rw).Error("a once approval stays spent, though its write may not have landed: " + why +
		"; if the object does not show the approved change, approve it again")
}

func (i *Interceptor) reservationLog(rw reservedWrite) *zap.Logger {
	return i.cfg.Log.With(zap.String("parent", rw.approval.Target.String()), zap.String("approval", rw.approval.Consumed.Name),
		zap.String("resource", rw.gvr.String()), zap.String("namespace", rw.namespace), zap.String("name", rw.name))
}
