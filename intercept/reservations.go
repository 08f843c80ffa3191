// What becomes of a reserved once approval when kube-apiserver has
// answered the write it was reserved for: it is spent by an applied write,
// put back after a refusal, and when the answer does not say (a 5xx, a
// broken connection, kube-apiserver restarting), what kube-apiserver
// stores decides. A write that provably did not land must not cost the
// person's approval; one that may have landed must not leave it usable.
// Each reservation is recorded in the cluster first (package
// reservations), so that one whose replica died is settled by another.

package intercept

import (
	"context"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/reservations"
)

const (
	// reservationSettleWindow bounds how long the replica that reserved an
	// approval keeps trying to read what kube-apiserver stores after an
	// answer that did not say whether the write landed. After it, the
	// record is left to the orphan settlement.
	reservationSettleWindow = 5 * time.Minute
	// DefaultReservationOrphanAge is when a reservation whose replica has
	// not settled it is settled by any replica: longer than its own
	// replica keeps trying, and than any write can be in flight.
	DefaultReservationOrphanAge = reservationSettleWindow + time.Minute
	// reservationOrphanInterval is how often orphans are looked for (at
	// most; a third of the orphan age when that is shorter).
	reservationOrphanInterval = 30 * time.Second
	// reservationMaxAge is when an orphan whose object cannot be read is
	// given up.
	reservationMaxAge = 24 * time.Hour
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
	reservationNotRecorded   = "not-recorded"
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
	// record is the reservation's record in the cluster; nil when it
	// could not be written (then a replica that dies takes the approval
	// with it).
	record *reservations.Record
	// orphan: the record was found, not written by this process; it is
	// honoured only while its parent vouches for its content.
	orphan bool
}

// reservedWriteOf describes the write of f for the settlement of upd.
func reservedWriteOf(f *facts, upd *decision.ApprovalsUpdate) reservedWrite {
	wr := f.req.w
	rw := reservedWrite{approval: upd, op: f.op, gvr: wr.gvr, namespace: f.namespace, name: wr.info.Name}
	if rw.name == "" && f.sent != nil {
		rw.name = f.sent.GetName()
	}
	if f.op != decision.Create && f.old != nil {
		rw.before = decision.StoredState{Exists: true, UID: string(f.old.GetUID()), ResourceVersion: f.old.GetResourceVersion()}
	}
	return rw
}

// reservedWriteFrom is the write of an orphaned record.
func reservedWriteFrom(rec *reservations.Record) reservedWrite {
	return reservedWrite{approval: rec.Update(), op: rec.Operation, gvr: rec.GVR(), namespace: rec.Namespace, name: rec.Name,
		before: rec.Before, record: rec, orphan: true}
}

// reserve records the reservation of upd for f's write, then takes the
// approval off the parent.
func (i *Interceptor) reserve(ctx context.Context, f *facts, upd *decision.ApprovalsUpdate) (reservedWrite, error) {
	rw := reservedWriteOf(f, upd)
	var rec *reservations.Record
	if i.cfg.Reservations != nil {
		var err error
		rec, err = i.cfg.Reservations.Open(ctx, reservations.Reservation{
			Parent: upd.Target, Approval: upd.Consumed, ApprovalRaw: upd.ConsumedRaw, Operation: rw.op,
			Group: rw.gvr.Group, Version: rw.gvr.Version, Resource: rw.gvr.Resource, Namespace: rw.namespace, Name: rw.name, Before: rw.before,
		})
		if err != nil {
			i.metrics.reservation(reservationNotRecorded)
			i.reservationLog(rw).Warn("the reservation of a once approval is not recorded: if this replica dies before the write is answered, the approval is lost", zap.Error(err))
		}
	}
	stamps := ""
	if parent := reservedParent(f, upd); parent != nil {
		stamps = parent.GetAnnotations()[annotations.Reservations]
	}
	if err := i.reserveApproval(ctx, upd, rec, stamps); err != nil {
		if rec != nil {
			if _, cerr := i.cfg.Reservations.Claim(ctx, rec); cerr != nil {
				i.reservationLog(rw).Info("cannot remove the record of a reservation that did not happen; it is settled later", zap.Error(cerr))
			}
		}
		return rw, err
	}
	rw.record = rec
	return rw, nil
}

// reservedParent is the snapshot of the parent upd takes the approval
// off: the one the write joins, or the one it leaves.
func reservedParent(f *facts, upd *decision.ApprovalsUpdate) *unstructured.Unstructured {
	if p := f.formerParent.obj; p != nil && upd.Target == decision.RefOf(p) {
		return p
	}
	return f.parent.obj
}

// settleReservation carries out what kube-apiserver's answer code means
// for the approval reserved for rw. A refusal restores the approval before
// the caller hears of it, so a client that retries at once finds it. An
// answer that does not say is settled by a read of the stored object, in
// the background when kube-apiserver cannot be read now.
func (i *Interceptor) settleReservation(rw reservedWrite, action decision.ReservedApprovalAction) {
	switch action {
	case decision.ApprovalUsed:
		// The record only tells an orphan settlement what to check; the
		// caller need not wait for it to go.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), i.cfg.SideWriteTimeout)
			defer cancel()
			i.finish(ctx, rw, reservationUsed, "")
		}()
	case decision.ApprovalRestore:
		i.giveBack(rw, "kube-apiserver refused the write")
	case decision.ApprovalCheckStored:
		ctx, cancel := context.WithTimeout(context.Background(), min(reservationFirstCheckTimeout, i.cfg.SideWriteTimeout))
		settled := i.checkStored(ctx, rw)
		cancel()
		if !settled {
			i.settleLater(rw)
		}
	}
}

// giveBack puts the approval reserved for rw back: its write was not
// stored (refused, or never forwarded, as why says).
func (i *Interceptor) giveBack(rw reservedWrite, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), i.cfg.SideWriteTimeout)
	settled := i.finish(ctx, rw, reservationRestored, why)
	cancel()
	if !settled {
		// Its record could not be claimed: what is stored decides once
		// kube-apiserver answers again (the object is unchanged).
		i.settleLater(rw)
	}
}

// settleLater settles rw in the background, from what kube-apiserver
// stores once it can be read.
func (i *Interceptor) settleLater(rw reservedWrite) {
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

// checkStored reads the object rw wrote and settles the approval from it.
// It reports false when it could not.
func (i *Interceptor) checkStored(ctx context.Context, rw reservedWrite) bool {
	if rw.name == "" {
		i.reservationLog(rw).Warn("a once approval stays spent: the write it was reserved for got no clear answer, and a create without a name cannot be looked for")
		return i.finish(ctx, rw, reservationKept, "")
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
		return i.finish(ctx, rw, reservationRestored, "the write got no clear answer, and kube-apiserver still stores the object as it was")
	}
	i.reservationLog(rw).Warn("a once approval stays spent: the write it was reserved for got no clear answer, and the object changed, maybe by that write",
		zap.String("resourceVersionBefore", rw.before.ResourceVersion), zap.String("resourceVersionAfter", after.ResourceVersion))
	return i.finish(ctx, rw, reservationKept, "")
}

// finish settles rw with outcome (reservationUsed, reservationKept or
// reservationRestored, for which why says why): it first claims rw's
// record, so that nobody else settles it too. It reports false when the
// record could not be claimed for now.
func (i *Interceptor) finish(ctx context.Context, rw reservedWrite, outcome, why string) bool {
	if rw.record != nil {
		claim, err := i.cfg.Reservations.Claim(ctx, rw.record)
		if err != nil {
			i.reservationLog(rw).Info("cannot claim the record of a reserved approval yet", zap.Error(err))
			return false
		}
		switch claim {
		case reservations.Lost:
			// Another replica settled it, from the same facts.
			return true
		case reservations.Rewritten:
			// Settled from what this process wrote, or, for an orphan,
			// from what its parent vouches for: never from the forgery.
			i.reservationLog(rw).Error("somebody other than the proxy rewrote a reservation record; the rewritten record is removed and the reservation is settled from the record as the proxy wrote it; " +
				"find who may write ConfigMaps in the proxy's namespace")
		}
	}
	if outcome == reservationRestored {
		i.restoreReservation(rw, why)
		return true
	}
	i.metrics.reservation(outcome)
	if rw.record != nil {
		if err := i.unstamp(ctx, rw.approval.Target, rw.record.ID()); err != nil {
			i.reservationLog(rw).Info("cannot take a settled reservation's name off its parent", zap.Error(err))
		}
	}
	return true
}

// checkStoredUntilSettled retries checkStored with backoff while
// kube-apiserver cannot be read, for at most reservationSettleWindow; then
// the record is left to the orphan settlement.
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
	if i.restoreApproval(rw.approval, rw.record, rw.orphan) {
		i.metrics.reservation(reservationRestored)
		i.reservationLog(rw).Info("a reserved once approval is back on its parent: " + why)
		return
	}
	i.metrics.reservation(reservationRestoreFailed)
}

func (i *Interceptor) unsettled(rw reservedWrite, why string) {
	i.metrics.reservation(reservationUnsettled)
	if rw.record != nil {
		i.reservationLog(rw).Warn("a reserved once approval is not settled yet: " + why + "; its record " + rw.record.ID() +
			" is settled by the next look for orphaned reservations")
		return
	}
	i.reservationLog(rw).Error("a once approval stays spent, though its write may not have landed: " + why +
		"; if the object does not show the approved change, approve it again")
}

func (i *Interceptor) reservationLog(rw reservedWrite) *zap.Logger {
	log := i.cfg.Log.With(zap.String("parent", rw.approval.Target.String()), zap.String("approval", rw.approval.Consumed.Name),
		zap.String("resource", rw.gvr.String()), zap.String("namespace", rw.namespace), zap.String("name", rw.name))
	if rw.record != nil {
		log = log.With(zap.String("record", rw.record.ID()), zap.String("reservedBy", rw.record.Replica))
	}
	return log
}

// settleOrphanedReservations settles, every reservationOrphanInterval, the
// reservations whose replica has not settled them within
// ReservationOrphanAge: it died, or could not read kube-apiserver for that
// long. Each is settled from what kube-apiserver stores, as an unclear
// answer is.
func (i *Interceptor) settleOrphanedReservations(ctx context.Context) {
	if i.cfg.Reservations == nil {
		return
	}
	interval := min(reservationOrphanInterval, i.cfg.ReservationOrphanAge/3)
	// The watch starts an interval after the proxy: nothing reserved
	// moments ago can be an orphan yet, and a start costs no request.
	select {
	case <-ctx.Done():
		return
	case <-time.After(interval):
	}
	i.cfg.Reservations.Run(ctx)
	wait.JitterUntilWithContext(ctx, i.settleOrphans, interval, 0.2, true)
}

// settleOrphans settles the reservations older than ReservationOrphanAge.
func (i *Interceptor) settleOrphans(ctx context.Context) {
	orphans, broken := i.cfg.Reservations.Orphans(i.cfg.ReservationOrphanAge)
	for _, rec := range broken {
		if claim, _ := i.cfg.Reservations.Claim(ctx, rec); claim != reservations.Lost {
			i.cfg.Log.Error("removed an approval reservation record that cannot be read", zap.String("record", rec.ID()))
		}
	}
	for _, rec := range orphans {
		rw := reservedWriteFrom(rec)
		readCtx, cancel := context.WithTimeout(ctx, i.cfg.SideWriteTimeout)
		if !i.vouchedFor(readCtx, rw) {
			cancel()
			continue
		}
		settled := i.checkStored(readCtx, rw)
		cancel()
		if !settled && i.cfg.Clock.Since(rec.Reserved) > reservationMaxAge {
			if claim, _ := i.cfg.Reservations.Claim(ctx, rec); claim != reservations.Lost {
				i.metrics.reservation(reservationUnsettled)
				i.reservationLog(rw).Error("gave up settling a reserved once approval: its object could not be read for " + reservationMaxAge.String() +
					"; if the object does not show the approved change, approve it again")
			}
		}
	}
}

// vouchedFor reports whether the parent of the orphaned record rw vouches
// for exactly what the record holds, so that no forged record makes the
// proxy read or write anything on its say-so. A record its parent does not
// vouch for is removed: it was forged, rewritten, or is left from a
// reservation that never took the approval off; its parent being gone,
// the approval has nowhere to go back to. It reports false also when the
// parent cannot be read now; the next look retries.
func (i *Interceptor) vouchedFor(ctx context.Context, rw reservedWrite) bool {
	log := i.reservationLog(rw)
	ri, err := i.resourceFor(rw.approval.Target)
	if err != nil {
		log.Info("cannot read the parent of an orphaned reservation", zap.Error(err))
		return false
	}
	parent, err := ri.Get(ctx, rw.approval.Target.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		log.Info("an orphaned reservation is dropped: its parent is gone")
	case err != nil:
		log.Info("cannot read the parent of an orphaned reservation yet", zap.Error(err))
		return false
	default:
		digest, named := annotations.ReservationDigest(parent.GetAnnotations()[annotations.Reservations], rw.record.ID())
		switch {
		case named && digest == rw.record.Digest():
			return true
		case named:
			log.Error("a reservation record is not what the proxy wrote when it took the approval off the parent: somebody who may write ConfigMaps in the proxy's namespace forged it; "+
				"it is removed and the approval stays spent, approve again if the write is still wanted",
				zap.String("vouchedDigest", digest), zap.String("recordDigest", rw.record.Digest()))
		default:
			log.Warn("a reservation record its parent does not name is removed: settled already, its reservation never made, or not written by the proxy")
		}
	}
	if claim, err := i.cfg.Reservations.Claim(ctx, rw.record); err == nil && claim != reservations.Lost {
		if err := i.unstamp(ctx, rw.approval.Target, rw.record.ID()); err != nil {
			log.Info("cannot take a removed reservation's name off its parent", zap.Error(err))
		}
	}
	return false
}
