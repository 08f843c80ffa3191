// Package sidewrites makes the proxy's own writes, with its own
// credentials, around the writes it forwards: the annotations a decision
// sets on a parent, the trace of a /scale write on the scaled object, and
// the once approvals taken off a parent for a write and put back or spent
// when kube-apiserver has answered it.
//
// What becomes of a reserved once approval when kube-apiserver has
// answered the write it was reserved for: it is spent by an applied write,
// put back after a refusal, and when the answer does not say (a 5xx, a
// broken connection, kube-apiserver restarting), what kube-apiserver
// stores decides, once the write can no longer land: kube-apiserver
// answers 504 at the write's deadline and lets it go on, so an object
// stored as it was proves the write did not land only after that
// deadline, which the proxy sets (the write's timeout there is what is
// left of the proxy's own). A write that provably did not land must not
// cost the person's approval; one that may have landed must not leave it
// usable.
// Each reservation is recorded in the cluster first (package
// reservations), so that one whose replica died is settled by another.

package sidewrites

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

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
	// landingGrace is how long after its deadline at kube-apiserver a write
	// may still land: the request reaching kube-apiserver after the proxy
	// sent it, and a storage transaction sent just before the deadline
	// committing after it.
	landingGrace = 10 * time.Second
	// DefaultWriteTimeout is the longest a forwarded write is processed
	// when none is given: the proxy's and kube-apiserver's default
	// --request-timeout.
	DefaultWriteTimeout = time.Minute
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

// Write is a write a once approval was reserved for, with what the
// proxy read of its object before forwarding it.
type Write struct {
	Approval  *decision.ApprovalsUpdate
	Operation decision.Operation
	GVR       schema.GroupVersionResource
	Namespace string
	// Name is "" for a create that only has a generateName: there is
	// nothing to look for.
	Name   string
	Before decision.StoredState
	// record is the reservation's record in the cluster; nil when it
	// could not be written (then a replica that dies takes the approval
	// with it).
	record *reservations.Record
	// orphan: the record was found, not written by this process; it is
	// honoured only while its parent vouches for its content.
	orphan bool
	// reserved is when the approval was reserved, before the write was
	// forwarded.
	reserved time.Time
	// landsBy, when set, is when the write can no longer land: until
	// then, an object stored as it was proves nothing.
	landsBy time.Time
}

// writeOf is the write of an orphaned record.
func writeOf(rec *reservations.Record) Write {
	return Write{Approval: rec.Update(), Operation: rec.Operation, GVR: rec.GVR(), Namespace: rec.Namespace, Name: rec.Name,
		Before: rec.Before, record: rec, orphan: true, reserved: rec.Reserved}
}

// Approvals reserves once approvals for writes and settles them when
// kube-apiserver has answered, or when their replica could not.
type Approvals struct {
	writer *Writer
	// records is nil when reservations are not recorded.
	records   *reservations.Store
	clock     clock.PassiveClock
	orphanAge time.Duration
	// inFlight is how long after its reservation a write may still land:
	// the longest kube-apiserver processes a forwarded write, and the
	// landingGrace.
	inFlight time.Duration
	// count counts an outcome of a reservation.
	count func(outcome string)
	// settling bounds the reservations settled in the background.
	settling chan struct{}
}

// NewApprovals returns the keeper of the once approvals writer takes off
// parents. records may be nil; orphanAge 0 is DefaultReservationOrphanAge.
// writeTimeout is the longest kube-apiserver processes a write the proxy
// forwards (the proxy's --request-timeout, which every forwarded write
// with a reserved approval carries as its timeout); 0 is
// DefaultWriteTimeout.
func NewApprovals(writer *Writer, records *reservations.Store, clk clock.PassiveClock, orphanAge, writeTimeout time.Duration, count func(outcome string)) *Approvals {
	if orphanAge <= 0 {
		orphanAge = DefaultReservationOrphanAge
	}
	if writeTimeout <= 0 {
		writeTimeout = DefaultWriteTimeout
	}
	return &Approvals{writer: writer, records: records, clock: clk, orphanAge: orphanAge, inFlight: writeTimeout + landingGrace, count: count,
		settling: make(chan struct{}, maxSettlingReservations)}
}

// Reserve records the reservation of rw.Approval, then takes the approval
// off the parent, whose kausality.io/reservations value in the snapshot
// the approval's precondition names is stamps.
func (a *Approvals) Reserve(ctx context.Context, rw Write, stamps string) (Write, error) {
	upd := rw.Approval
	rw.reserved = a.clock.Now()
	var rec *reservations.Record
	if a.records != nil {
		var err error
		rec, err = a.records.Open(ctx, reservations.Reservation{
			Parent: upd.Target, Approval: upd.Consumed, ApprovalRaw: upd.ConsumedRaw, Operation: rw.Operation,
			Group: rw.GVR.Group, Version: rw.GVR.Version, Resource: rw.GVR.Resource, Namespace: rw.Namespace, Name: rw.Name, Before: rw.Before,
		})
		if err != nil {
			a.count(reservationNotRecorded)
			a.reservationLog(rw).Warn("the reservation of a once approval is not recorded: if this replica dies before the write is answered, the approval is lost", zap.Error(err))
		}
	}
	if err := a.writer.reserveApproval(ctx, upd, rec, stamps); err != nil {
		// Only a refusal says the approval was not taken. Any other
		// failure (a timeout, an answer lost with its connection) may
		// come after kube-apiserver took it: the record stays, and the
		// orphan settlement puts the approval back once the parent's
		// stamp shows it was taken for a write that never came.
		if rec != nil && refused(err) {
			if _, cerr := a.records.Claim(ctx, rec); cerr != nil {
				a.reservationLog(rw).Info("cannot remove the record of a reservation that did not happen; it is settled later", zap.Error(cerr))
			}
		}
		return rw, err
	}
	rw.record = rec
	return rw, nil
}

// refused reports whether err is kube-apiserver's refusal of a write,
// which it then did not carry out: a 4xx answer but a timeout (a 429 of
// its priority and fairness comes before the write is looked at).
func refused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}

// Settle carries out what kube-apiserver's answer code means
// for the approval reserved for rw. A refusal restores the approval before
// the caller hears of it, so a client that retries at once finds it. An
// answer that does not say is settled by a read of the stored object, in
// the background when kube-apiserver cannot be read now.
func (a *Approvals) Settle(rw Write, action decision.ReservedApprovalAction) {
	switch action {
	case decision.ApprovalUsed:
		// The record only tells an orphan settlement what to check; the
		// caller need not wait for it to go.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), a.writer.Timeout)
			defer cancel()
			a.finish(ctx, rw, reservationUsed, "")
		}()
	case decision.ApprovalRestore:
		a.GiveBack(rw, "kube-apiserver refused the write")
	case decision.ApprovalCheckStored, decision.ApprovalCheckStoredAfterDeadline:
		if action == decision.ApprovalCheckStoredAfterDeadline {
			rw.landsBy = rw.reserved.Add(a.inFlight)
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(reservationFirstCheckTimeout, a.writer.Timeout))
		settled := a.checkStored(ctx, rw)
		cancel()
		if !settled {
			a.settleLater(rw)
		}
	}
}

// GiveBack puts the approval reserved for rw back: its write was not
// stored (refused, or never forwarded, as why says).
func (a *Approvals) GiveBack(rw Write, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), a.writer.Timeout)
	settled := a.finish(ctx, rw, reservationRestored, why)
	cancel()
	if !settled {
		// Its record could not be claimed: what is stored decides once
		// kube-apiserver answers again (the object is unchanged).
		a.settleLater(rw)
	}
}

// settleLater settles rw in the background, from what kube-apiserver
// stores once it can be read.
func (a *Approvals) settleLater(rw Write) {
	select {
	case a.settling <- struct{}{}:
		go func() {
			defer func() { <-a.settling }()
			a.checkStoredUntilSettled(rw)
		}()
	default:
		a.unsettled(rw, "too many reservations are waiting for kube-apiserver")
	}
}

// checkStored reads the object rw wrote and settles the approval from it.
// It reports false when it could not.
func (a *Approvals) checkStored(ctx context.Context, rw Write) bool {
	if rw.Name == "" {
		a.reservationLog(rw).Warn("a once approval stays spent: the write it was reserved for got no clear answer, and a create without a name cannot be looked for")
		return a.finish(ctx, rw, reservationKept, "")
	}
	live, err := a.writer.Objects.GetLive(ctx, rw.GVR, rw.Namespace, rw.Name)
	after := decision.StoredState{}
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		a.reservationLog(rw).Info("cannot read the object of a write with no clear answer yet", zap.Error(err))
		return false
	default:
		after = decision.StoredState{Exists: true, UID: string(live.GetUID()), ResourceVersion: live.GetResourceVersion()}
	}
	if decision.WriteNotApplied(rw.Operation, rw.Before, after) {
		// An object stored as it was proves nothing while the write may
		// still be processed: kube-apiserver answers 504 at its deadline
		// and lets the write go on, and a lost connection says nothing of
		// the request it carried. Put back before then, the approval
		// could admit the retry as well as the write.
		if a.clock.Now().Before(rw.landsBy) {
			a.reservationLog(rw).Debug("the object of a write with no clear answer is stored as it was; the approval goes back once the write can no longer land",
				zap.Time("landsBy", rw.landsBy))
			return false
		}
		return a.finish(ctx, rw, reservationRestored, "the write got no clear answer, and kube-apiserver still stores the object as it was after the write's deadline")
	}
	a.reservationLog(rw).Warn("a once approval stays spent: the write it was reserved for got no clear answer, and the object changed, maybe by that write",
		zap.String("resourceVersionBefore", rw.Before.ResourceVersion), zap.String("resourceVersionAfter", after.ResourceVersion))
	return a.finish(ctx, rw, reservationKept, "")
}

// finish settles rw with outcome (reservationUsed, reservationKept or
// reservationRestored, for which why says why): it first claims rw's
// record, so that nobody else settles it too. It reports false when the
// record could not be claimed for now.
func (a *Approvals) finish(ctx context.Context, rw Write, outcome, why string) bool {
	if rw.record != nil {
		claim, err := a.records.Claim(ctx, rw.record)
		if err != nil {
			a.reservationLog(rw).Info("cannot claim the record of a reserved approval yet", zap.Error(err))
			return false
		}
		switch claim {
		case reservations.Lost:
			// Another replica settled it, from the same facts.
			return true
		case reservations.Rewritten:
			// Settled from what this process wrote, or, for an orphan,
			// from what its parent vouches for: never from the forgery.
			a.reservationLog(rw).Error("somebody other than the proxy rewrote a reservation record; the rewritten record is removed and the reservation is settled from the record as the proxy wrote it; " +
				"find who may write ConfigMaps in the proxy's namespace")
		}
	}
	if outcome == reservationRestored {
		a.restoreReservation(rw, why)
		return true
	}
	a.count(outcome)
	if rw.record != nil {
		if err := a.writer.unstamp(ctx, rw.Approval.Target, rw.record.ID()); err != nil {
			a.reservationLog(rw).Info("cannot take a settled reservation's name off its parent", zap.Error(err))
		}
	}
	return true
}

// checkStoredUntilSettled retries checkStored with backoff until the write
// can no longer land and while kube-apiserver cannot be read, for at most
// reservationSettleWindow past the write's deadline; then the record is
// left to the orphan settlement.
func (a *Approvals) checkStoredUntilSettled(rw Write) {
	window := reservationSettleWindow + max(0, rw.landsBy.Sub(a.clock.Now()))
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	// Step keeps returning the cap once it is reached: the retries go on
	// for the whole window (wait.ExponentialBackoff would stop there).
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 20, Cap: 15 * time.Second}
	for {
		readCtx, readCancel := context.WithTimeout(ctx, a.writer.Timeout)
		settled := a.checkStored(readCtx, rw)
		readCancel()
		if settled {
			return
		}
		select {
		case <-ctx.Done():
			a.unsettled(rw, "it could not be settled within "+window.Round(time.Second).String())
			return
		case <-time.After(backoff.Step()):
		}
	}
}

func (a *Approvals) restoreReservation(rw Write, why string) {
	if a.writer.restoreApproval(rw.Approval, rw.record, rw.orphan) {
		a.count(reservationRestored)
		a.reservationLog(rw).Info("a reserved once approval is back on its parent: " + why)
		return
	}
	a.count(reservationRestoreFailed)
}

func (a *Approvals) unsettled(rw Write, why string) {
	a.count(reservationUnsettled)
	if rw.record != nil {
		a.reservationLog(rw).Warn("a reserved once approval is not settled yet: " + why + "; its record " + rw.record.ID() +
			" is settled by the next look for orphaned reservations")
		return
	}
	a.reservationLog(rw).Error("a once approval stays spent, though its write may not have landed: " + why +
		"; if the object does not show the approved change, approve it again")
}

func (a *Approvals) reservationLog(rw Write) *zap.Logger {
	log := a.writer.Log.With(zap.String("parent", rw.Approval.Target.String()), zap.String("approval", rw.Approval.Consumed.Name),
		zap.String("resource", rw.GVR.String()), zap.String("namespace", rw.Namespace), zap.String("name", rw.Name))
	if rw.record != nil {
		log = log.With(zap.String("record", rw.record.ID()), zap.String("reservedBy", rw.record.Replica))
	}
	return log
}

// RunOrphanSettlement settles, every reservationOrphanInterval, the
// reservations whose replica has not settled them within
// ReservationOrphanAge: it died, or could not read kube-apiserver for that
// long. Each is settled from what kube-apiserver stores, as an unclear
// answer is.
func (a *Approvals) RunOrphanSettlement(ctx context.Context) {
	if a.records == nil {
		return
	}
	interval := min(reservationOrphanInterval, a.orphanAge/3)
	// The watch starts an interval after the proxy: nothing reserved
	// moments ago can be an orphan yet, and a start costs no request.
	select {
	case <-ctx.Done():
		return
	case <-time.After(interval):
	}
	a.records.Run(ctx)
	wait.JitterUntilWithContext(ctx, a.SettleOrphans, interval, 0.2, true)
}

// SettleOrphans settles the reservations older than ReservationOrphanAge.
func (a *Approvals) SettleOrphans(ctx context.Context) {
	orphans, broken := a.records.Orphans(a.orphanAge)
	for _, rec := range broken {
		if claim, _ := a.records.Claim(ctx, rec); claim != reservations.Lost {
			a.writer.Log.Error("removed an approval reservation record that cannot be read", zap.String("record", rec.ID()))
		}
	}
	for _, rec := range orphans {
		rw := writeOf(rec)
		// Nothing says whether its write was answered: it may have been
		// forwarded moments before its replica died.
		rw.landsBy = rw.reserved.Add(a.inFlight)
		readCtx, cancel := context.WithTimeout(ctx, a.writer.Timeout)
		settled := a.vouchedFor(readCtx, rw) && a.checkStored(readCtx, rw)
		cancel()
		// A record whose parent or object cannot be read for so long (its
		// kind no longer served, kube-apiserver refusing) is given up, or
		// every replica would look at it for good.
		if !settled && a.clock.Since(rec.Reserved) > reservationMaxAge {
			if claim, _ := a.records.Claim(ctx, rec); claim != reservations.Lost {
				a.count(reservationUnsettled)
				a.reservationLog(rw).Error("gave up settling a reserved once approval: its parent or object could not be read for " + reservationMaxAge.String() +
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
func (a *Approvals) vouchedFor(ctx context.Context, rw Write) bool {
	log := a.reservationLog(rw)
	ri, err := a.writer.ResourceFor(rw.Approval.Target)
	if err != nil {
		log.Info("cannot read the parent of an orphaned reservation", zap.Error(err))
		return false
	}
	parent, err := ri.Get(ctx, rw.Approval.Target.Name, metav1.GetOptions{})
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
	if claim, err := a.records.Claim(ctx, rw.record); err == nil && claim != reservations.Lost {
		if err := a.writer.unstamp(ctx, rw.Approval.Target, rw.record.ID()); err != nil {
			log.Info("cannot take a removed reservation's name off its parent", zap.Error(err))
		}
	}
	return false
}
