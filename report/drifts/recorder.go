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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/internal/proxynamespace"
	"github.com/kausality-io/kausality-proxy/report/notify"
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
	if l == nil || d == nil || d.Parent == nil || w.DryRun {
		return
	}
	allowances := notify.AllowanceVerdict(d)
	if d.Report != decision.ReportDetected && (d.Report != decision.ReportNone || allowances == nil) {
		return
	}
	r := notify.FromDecision(d, w)
	name := RecordName(r.Spec.ID)
	if st, ok := l.cachedState(name); ok && st.Resolved == nil {
		l.m.recorded.WithLabelValues(resultDeduplicated).Inc()
		return
	}
	// A record keeps a bounded summary, made now: the objects belong to
	// the request.
	rec := &Record{Name: name, Report: summarize(r), State: State{ParentSpecHash: settle.SpecHash(parent), Mode: d.Mode, Held: d.Result == decision.Deny}}
	if d.Report != decision.ReportDetected {
		// Only the allowance check found something: its mode is the
		// record's.
		rec.State.Mode = annotations.DriftMode(allowances.Mode)
	}
	if !l.allow(rec) {
		l.suppress(QuotaRate, rec)
		return
	}
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
	floods := l.o.Clock.NewTicker(max(l.o.FloodQuiet/2, time.Second))
	defer floods.Stop()
	for {
		select {
		case <-floods.C():
			l.endQuietFloods()
		case rec := <-l.intake:
			for !l.create(ctx, rec, 0) {
				if !l.awaitNamespace(ctx) {
					l.log.Error("DriftReport not recorded: the proxy stops while its namespace is missing", zap.String("id", rec.ID()),
						zap.Error(proxynamespace.MissingError(l.o.Namespace)))
					l.drop(dropRecordFailed, rec)
					break
				}
			}
		case <-l.closed:
			for {
				select {
				case rec := <-l.intake:
					if !l.create(ctx, rec, 0) {
						l.log.Error("DriftReport not recorded: the proxy stops while its namespace is missing", zap.String("id", rec.ID()),
							zap.Error(proxynamespace.MissingError(l.o.Namespace)))
						l.drop(dropRecordFailed, rec)
					}
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

// namespaceRetry is how often a drift is retried while the proxy's
// namespace is missing.
const namespaceRetry = 2 * time.Second

// awaitNamespace waits before the next attempt to record a drift while the
// proxy's namespace is missing; false when the ledger stops first. The
// drift waits instead of being dropped: the namespace may be created at
// any time, and the drifts that arrive meanwhile wait in the bounded
// intake queue, each counted and logged if it overflows.
func (l *Ledger) awaitNamespace(ctx context.Context) bool {
	l.mu.Lock()
	first := !l.namespaceMissing
	l.namespaceMissing = true
	l.mu.Unlock()
	if first {
		l.log.Error("drifts wait to be recorded until the proxy's namespace exists", zap.String("namespace", l.o.Namespace),
			zap.Error(proxynamespace.MissingError(l.o.Namespace)))
	}
	select {
	case <-ctx.Done():
		return false
	case <-l.closed:
		return false
	case <-l.o.Clock.After(namespaceRetry):
		return true
	}
}

// create records rec. Creating the ConfigMap is the claim: of the replicas
// that see the same drift, one creates it; the others find it there. A
// drift that comes back while its record still says resolved (the Resolved
// report may not be out yet) is reopened. It returns false, having done
// nothing, when the proxy's namespace does not exist.
func (l *Ledger) create(ctx context.Context, rec *Record, attempt int) bool {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	rec.State.DetectedAt = metav1.NewTime(l.o.Clock.Now())
	cm, err := encode(rec, l.o.Namespace)
	if err != nil {
		l.log.Warn("cannot record a drift", zap.String("id", rec.ID()), zap.Error(err))
		l.drop(dropRecordFailed, rec)
		return true
	}
	// Reopening a record takes no more room than it has.
	if _, exists, _ := l.records.GetStore().GetByKey(l.o.Namespace + "/" + rec.Name); !exists {
		if reason := Admit(l.o.Quotas, l.quotaFacts(cm)); reason != "" {
			l.suppress(reason, rec)
			return true
		}
	}
	cms := l.o.Client.CoreV1().ConfigMaps(l.o.Namespace)
	_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: managedBy})
	if proxynamespace.Missing(err) {
		return false
	}
	l.mu.Lock()
	resumed := l.namespaceMissing && err == nil
	if err == nil {
		l.namespaceMissing = false
	}
	l.mu.Unlock()
	if resumed {
		l.log.Info("the proxy's namespace exists: the drifts that waited are recorded", zap.String("namespace", l.o.Namespace))
	}
	switch {
	case err == nil:
		l.m.recorded.WithLabelValues(resultCreated).Inc()
		l.mu.Lock()
		l.pending[cm.Name] = pendingRecord{controller: cm.Labels[ControllerLabel], parent: cm.Labels[ParentLabel],
			namespace: cm.Labels[NamespaceLabel], bytes: recordBytes(cm), at: l.o.Clock.Now()}
		l.mu.Unlock()
		return true
	case !apierrors.IsAlreadyExists(err):
		l.log.Warn("cannot record a drift", zap.String("id", rec.ID()), zap.Error(err))
		l.drop(dropRecordFailed, rec)
		return true
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
		reopen(existing, rec)
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
		return l.create(ctx, rec, attempt+1)
	case err != nil:
		l.log.Warn("cannot reopen a drift record", zap.String("id", rec.ID()), zap.Error(err))
		l.drop(dropRecordFailed, rec)
	case reopened:
		l.m.recorded.WithLabelValues(resultReopened).Inc()
	default:
		l.m.recorded.WithLabelValues(resultDeduplicated).Inc()
	}
	return true
}

// reopen turns a resolved record back into an open drift, detected as in
// again: the drift is judged, reported and acted on (Slack, kubectl
// kausality drifts) by the new detection's parent spec, time, mode and
// report, not the old one's, which the parent may have left since. A
// receiver that got the Resolved report gets the Detected report again;
// one that did not sees the drift as never ended.
func reopen(r, again *Record) {
	r.Report = again.Report
	r.State.ParentSpecHash, r.State.DetectedAt = again.State.ParentSpecHash, again.State.DetectedAt
	r.State.Mode, r.State.Held = again.State.Mode, again.State.Held
	r.State.Resolved = nil
	for k, phase := range r.State.Delivered {
		if phase == v1alpha1.PhaseResolved {
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

// pendingRecord is a record this replica created and the informer has not
// shown yet.
type pendingRecord struct {
	controller, parent, namespace string
	bytes                         int64
	at                            time.Time
}

// pendingTimeout forgets a pending record the informer never showed (it
// was deleted before the watch saw it).
const pendingTimeout = time.Minute

// recordBytes is what a record takes in the quotas: its data.
func recordBytes(cm *corev1.ConfigMap) int64 {
	var n int64
	for k, v := range cm.Data {
		n += int64(len(k) + len(v))
	}
	return n
}

// parentShare is what the records of parent hold of controller, and the
// controllers holding them, controller included.
func parentShare(indexer cache.Indexer, parent, controller string) (Usage, map[string]bool) {
	var u Usage
	controllers := map[string]bool{controller: true}
	objs, _ := indexer.ByIndex(parentIndex, parent)
	for _, obj := range objs {
		if c, ok := obj.(*corev1.ConfigMap); ok {
			controllers[c.Labels[ControllerLabel]] = true
			if c.Labels[ControllerLabel] == controller {
				u.Records++
				u.Bytes += recordBytes(c)
			}
		}
	}
	return u, controllers
}

// quotaFacts gathers, from the informer and the records this replica
// created since, the records the new record cm would join.
func (l *Ledger) quotaFacts(cm *corev1.ConfigMap) QuotaFacts {
	controller, parent, namespace := cm.Labels[ControllerLabel], cm.Labels[ParentLabel], cm.Labels[NamespaceLabel]
	f := QuotaFacts{Size: recordBytes(cm)}
	indexer := l.records.GetIndexer()
	usage := func(index, key string) Usage {
		var u Usage
		objs, _ := indexer.ByIndex(index, key)
		for _, obj := range objs {
			if c, ok := obj.(*corev1.ConfigMap); ok {
				u.Records++
				u.Bytes += recordBytes(c)
			}
		}
		return u
	}
	f.Controller, f.Parent, f.Namespace = usage(controllerIndex, controller), usage(parentIndex, parent), usage(namespaceIndex, namespace)
	var parentControllers map[string]bool
	f.ParentController, parentControllers = parentShare(indexer, parent, controller)
	f.Total = len(indexer.ListKeys())
	controllers := indexer.ListIndexFuncValues(controllerIndex)
	f.Controllers = len(controllers)
	if f.Controller.Records == 0 {
		f.Controllers++
	}
	f.Namespaces = len(indexer.ListIndexFuncValues(namespaceIndex))
	if f.Namespace.Records == 0 {
		f.Namespaces++
	}
	now := l.o.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, p := range l.pending {
		if _, exists, _ := indexer.GetByKey(l.o.Namespace + "/" + name); exists || now.Sub(p.at) > pendingTimeout {
			delete(l.pending, name)
			continue
		}
		f.Total++
		if p.controller == controller {
			f.Controller.Records++
			f.Controller.Bytes += p.bytes
		}
		if p.parent == parent {
			f.Parent.Records++
			f.Parent.Bytes += p.bytes
			parentControllers[p.controller] = true
			if p.controller == controller {
				f.ParentController.Records++
				f.ParentController.Bytes += p.bytes
			}
		}
		if p.namespace == namespace {
			f.Namespace.Records++
			f.Namespace.Bytes += p.bytes
		}
	}
	f.ParentControllers = len(parentControllers)
	return f
}
