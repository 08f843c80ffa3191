// Writes to parents for once approvals: taking one off before its write
// is forwarded, putting it back when the write did not land, and taking a
// settled reservation's name off.

package sidewrites

import (
	"context"
	"errors"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/reservations"
)

// reserveApproval takes a once approval off the parent before the write is
// forwarded, and in the same patch vouches on the parent for the
// reservation's record (nil without one) by its name and digest. The
// resourceVersion precondition makes it exactly-once: of two concurrent
// writes that both saw the approval, only one patch succeeds. stamps is
// the parent's Reservations value in the snapshot the precondition names.
func (w *Writer) reserveApproval(ctx context.Context, upd *decision.ApprovalsUpdate, rec *reservations.Record, stamps string) error {
	ri, err := w.ResourceFor(upd.Target)
	if err != nil {
		return err
	}
	set := map[string]*string{annotations.Approvals: nil}
	if upd.New != "" {
		set[annotations.Approvals] = &upd.New
	}
	if rec != nil {
		stamped := annotations.AddReservation(stamps, rec.ID(), rec.Digest())
		set[annotations.Reservations] = &stamped
	}
	data, err := AnnotationPatch(set, upd.ResourceVersion)
	if err != nil {
		return err
	}
	_, err = ri.Patch(ctx, upd.Target.Name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: w.FieldManager})
	return err
}

// restoreApproval puts a reserved once approval back after the write it
// was reserved for was not applied, and takes the reservation's record
// (nil without one) off the parent. It merges into the parent's current
// approvals, so edits made in between are kept. For an orphaned record,
// the approval goes back only if the parent still vouches for exactly
// the record's content: a record is trusted only as far as its parent
// vouches for it. It reports whether the approval is back on the parent.
func (w *Writer) restoreApproval(upd *decision.ApprovalsUpdate, rec *reservations.Record, orphan bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), w.Timeout)
	defer cancel()
	recordID := ""
	if rec != nil {
		recordID = rec.ID()
	}
	log := w.Log.With(zap.String("parent", upd.Target.String()), zap.String("approval", upd.Consumed.Name), zap.String("record", recordID))
	ri, err := w.ResourceFor(upd.Target)
	if err != nil {
		log.Error("cannot restore a reserved approval", zap.Error(err))
		return false
	}
	for attempt := 0; attempt < 5; attempt++ {
		parent, err := ri.Get(ctx, upd.Target.Name, metav1.GetOptions{})
		if err != nil {
			log.Error("cannot restore a reserved approval", zap.Error(err))
			return false
		}
		current := parent.GetAnnotations()
		set := map[string]*string{}
		if rec != nil {
			stamps, honoured := w.honouredStamps(ctx, log, upd, rec, orphan, current[annotations.Reservations])
			if !honoured {
				return false
			}
			if stamps != nil {
				set[annotations.Reservations] = *stamps
			}
		}
		value, changed, err := upd.Restore(current[annotations.Approvals])
		if err != nil {
			log.Error("cannot restore a reserved approval", zap.Error(err))
			return false
		}
		if changed {
			set[annotations.Approvals] = &value
		}
		if len(set) == 0 {
			return true
		}
		data, _ := AnnotationPatch(set, parent.GetResourceVersion())
		_, err = ri.Patch(ctx, upd.Target.Name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: w.FieldManager})
		if err == nil {
			return true
		}
		if !apierrors.IsConflict(err) {
			log.Error("cannot restore a reserved approval", zap.Error(err))
			return false
		}
	}
	log.Error("cannot restore a reserved approval: the parent kept changing")
	return false
}

// unstamp takes a settled reservation's record off its parent. A name
// left behind only costs a few bytes: it names no record any more.
func (w *Writer) unstamp(ctx context.Context, target decision.ObjectRef, recordID string) error {
	ri, err := w.ResourceFor(target)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 5; attempt++ {
		parent, err := ri.Get(ctx, target.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		rest, named := annotations.RemoveReservation(parent.GetAnnotations()[annotations.Reservations], recordID)
		if !named {
			return nil
		}
		data, _ := AnnotationPatch(map[string]*string{annotations.Reservations: nilIfEmpty(rest)}, parent.GetResourceVersion())
		_, err = ri.Patch(ctx, target.Name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: w.FieldManager})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return errors.New("the parent kept changing")
}

// honouredStamps checks that the parent, whose reservations annotation is
// stamps, vouches for rec, and returns the annotation's new value without
// rec (nil: unchanged). A forged or unknown orphan is not honoured.
func (w *Writer) honouredStamps(ctx context.Context, log *zap.Logger, upd *decision.ApprovalsUpdate, rec *reservations.Record, orphan bool, stamps string) (**string, bool) {
	recordID := rec.ID()
	digest, named := annotations.ReservationDigest(stamps, recordID)
	switch {
	case !named && orphan:
		log.Warn("a reservation record was not honoured: its parent does not name it (settled already, or not written by the proxy)")
		return nil, false
	case named && orphan && digest != rec.Digest():
		log.Error("a reservation record was not honoured: it is not what the proxy wrote when it took the approval off the parent, "+
			"somebody who may write ConfigMaps in the proxy's namespace forged it; the approval stays spent, approve again if the write is still wanted",
			zap.String("vouchedDigest", digest), zap.String("recordDigest", rec.Digest()))
		// The record it names is gone with the claim.
		if err := w.unstamp(ctx, upd.Target, recordID); err != nil {
			log.Info("cannot take a forged reservation's name off its parent", zap.Error(err))
		}
		return nil, false
	case named:
		rest, _ := annotations.RemoveReservation(stamps, recordID)
		value := nilIfEmpty(rest)
		return &value, true
	}
	return nil, true
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
