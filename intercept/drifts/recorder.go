package drifts

import (
	"context"
	"encoding/json"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/notify"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// recordTimeout bounds one attempt to record a drift.
const recordTimeout = 10 * time.Second

// Observe records the drift a decided write was found to be. Call it once
// the outcome of the write is known (after a denial, or after the upstream
// accepted the write). It never blocks: a drift already recorded costs a
// cache lookup, and a new one is queued for the recorder, or dropped,
// counted and logged when the queue is full.
//
// Only detection is taken from the write path. A drift ends when the
// parent or the child changes, which the sender sees in its informers
// whichever replica served the write that ended it.
func (l *Ledger) Observe(d *decision.Decision, w notify.Write, parent *unstructured.Unstructured) {
	if l == nil || d == nil || d.Parent == nil || w.DryRun || d.Report != decision.ReportDetected {
		return
	}
	r := notify.FromDecision(d, w)
	name := RecordName(r.Spec.ID)
	if st, ok := l.cachedState(name); ok && st.Resolved == nil {
		l.m.recorded.WithLabelValues(resultDeduplicated).Inc()
		return
	}
	// The objects belong to the request: serialize them before it ends.
	if err := rawify(&r.Spec); err != nil {
		l.log.Error("cannot serialize the objects of a DriftReport", zap.String("id", r.Spec.ID), zap.Error(err))
		r.Spec.OldObject, r.Spec.NewObject = runtime.RawExtension{}, runtime.RawExtension{}
	}
	rec := &Record{Name: name, Report: r, State: State{ParentSpecHash: settle.SpecHash(parent)}}
	select {
	case <-l.closed:
		l.drop(dropShutdown, rec)
	default:
		select {
		case l.intake <- rec:
		default:
			l.drop(dropQueueFull, rec)
		}
	}
}

func rawify(sp *notify.DriftReportSpec) error {
	for _, e := range [...]*runtime.RawExtension{&sp.OldObject, &sp.NewObject} {
		if e.Raw != nil || e.Object == nil {
			continue
		}
		b, err := json.Marshal(e.Object)
		if err != nil {
			return err
		}
		e.Raw, e.Object = b, nil
	}
	return nil
}

// cachedState returns the state of the record named name as the informer
// holds it. Only the state is decoded: this runs on the write path for
// every retry of a denied drift, and the report may be large.
func (l *Ledger) cachedState(name string) (State, bool) {
	obj, exists, err := l.records.GetStore().GetByKey(l.o.Namespace + "/" + name)
	if err != nil || !exists {
		return State{}, false
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return State{}, false
	}
	var st State
	if err := json.Unmarshal([]byte(cm.Data[stateKey]), &st); err != nil {
		return State{}, false
	}
	return st, true
}

// record writes queued drifts to the cluster until Shutdown, then drains
// the queue.
func (l *Ledger) record(ctx context.Context) {
	defer close(l.recorded)
	for {
		select {
		case rec := <-l.intake:
			l.create(ctx, rec, 0)
		case <-l.closed:
			for {
				select {
				case rec := <-l.intake:
					l.create(ctx, rec, 0)
				default:
					return
				}
			}
		case <-ctx.Done():
			for {
				select {
				case rec := <-l.intake:
					l.drop(dropShutdown, rec)
				default:
					return
				}
			}
		}
	}
}

// create records rec. Creating the ConfigMap is the claim: of the replicas
// that see the same drift, one creates it; the others find it there. A
// drift that comes back while its record still says resolved (the Resolved
// report may not be out yet) is reopened.
func (l *Ledger) create(ctx context.Context, rec *Record, attempt int) {
	if len(l.records.GetStore().ListKeys()) >= l.o.MaxRecords {
		l.drop(dropStoreFull, rec)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	rec.State.DetectedAt = metav1.NewTime(l.o.Clock.Now())
	cm, err := encode(rec, l.o.Namespace)
	if err != nil {
		l.drop(dropRecordFailed, rec)
		return
	}
	cms := l.o.Client.CoreV1().ConfigMaps(l.o.Namespace)
	_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: managedBy})
	switch {
	case err == nil:
		l.m.recorded.WithLabelValues(resultCreated).Inc()
		return
	case !apierrors.IsAlreadyExists(err):
		l.log.Warn("cannot record a drift", zap.String("id", rec.ID()), zap.Error(err))
		l.drop(dropRecordFailed, rec)
		return
	}
	reopened := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cms.Get(ctx, rec.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		existing, err := decode(cur)
		if err != nil {
			return err
		}
		if existing.State.Resolved == nil {
			return nil
		}
		reopen(existing)
		out, err := encode(existing, l.o.Namespace)
		if err != nil {
			return err
		}
		if _, err := cms.Update(ctx, out, metav1.UpdateOptions{FieldManager: managedBy}); err != nil {
			return err
		}
		reopened = true
		return nil
	})
	switch {
	case apierrors.IsNotFound(err) && attempt == 0:
		// Deleted after delivery in the meantime: record it anew.
		l.create(ctx, rec, attempt+1)
	case err != nil:
		l.log.Warn("cannot reopen a drift record", zap.String("id", rec.ID()), zap.Error(err))
		l.drop(dropRecordFailed, rec)
	case reopened:
		l.m.recorded.WithLabelValues(resultReopened).Inc()
	default:
		l.m.recorded.WithLabelValues(resultDeduplicated).Inc()
	}
}

// reopen turns a resolved record back into an open drift. A receiver that
// got the Resolved report gets the Detected report again; one that did not
// sees the drift as never ended.
func reopen(r *Record) {
	r.State.Resolved = nil
	for k, phase := range r.State.Delivered {
		if phase == notify.PhaseResolved {
			delete(r.State.Delivered, k)
		}
	}
	if r.State.SlackResolved {
		r.State.Slack, r.State.SlackResolved = nil, false
	}
}

// drop counts and logs a drift that will not be recorded (rate-limited
// log: a flood of drops must not become a flood of lines).
func (l *Ledger) drop(reason string, rec *Record) {
	l.m.dropped.WithLabelValues(reason).Inc()
	now := l.o.Clock.Now()
	l.mu.Lock()
	logIt := now.Sub(l.lastLog) >= time.Second
	if logIt {
		l.lastLog = now
	}
	l.mu.Unlock()
	if logIt {
		l.log.Warn("DriftReport dropped", zap.String("reason", reason), zap.String("id", rec.ID()),
			zap.String("parent", rec.Report.Spec.Parent.Kind+" "+rec.Report.Spec.Parent.Namespace+"/"+rec.Report.Spec.Parent.Name),
			zap.String("child", rec.Report.Spec.Child.Kind+" "+rec.Report.Spec.Child.Name))
	}
}
