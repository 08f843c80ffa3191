package drifts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/report/escalation"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// readTimeout bounds the reads of a record's parent and child.
const readTimeout = 10 * time.Second

// errDelivery: some delivery of a record failed and is to be retried.
var errDelivery = errors.New("delivery failed")

// reconcile moves one record on: resolves it when its drift has ended,
// delivers what each receiver lacks, escalates, and deletes the record once
// everything is out. It returns an error when it is to be retried, and a
// delay when a receiver asked for one.
func (l *Ledger) reconcile(ctx context.Context, name string) (time.Duration, error) {
	obj, exists, err := l.records.GetStore().GetByKey(l.o.Namespace + "/" + name)
	if err != nil || !exists {
		return 0, nil
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return 0, nil
	}
	if l.stale(cm) {
		// This replica changed the record and the informer has not caught
		// up: acting on the old version would deliver a phase again.
		l.enqueueAfter(name, staleRetry)
		return 0, nil
	}
	rec, err := decode(cm)
	if err != nil {
		l.log.Error("deleting a drift record that cannot be read", zap.String("record", name), zap.Error(err))
		l.m.dropped.WithLabelValues(dropUnreadable).Inc()
		return 0, l.delete(ctx, cm.Name, cm.ResourceVersion)
	}
	now := l.o.Clock.Now()
	var readErr error
	if rec.State.Resolved == nil {
		done, err := l.checkResolution(ctx, rec, now)
		if done {
			return 0, err
		}
		// An object that cannot be read now must not hold back the
		// reports: deliver, and look again later.
		if readErr = err; err != nil {
			l.log.Info("cannot tell whether a drift has ended; retrying", zap.String("id", rec.ID()), zap.Error(err))
		}
	}
	if since, pending := l.undeliveredSince(rec); pending && now.Sub(since) > l.o.MaxAge {
		l.log.Warn("DriftReport given up: not delivered within the maximum age", zap.String("id", rec.ID()),
			zap.Duration("maxAge", l.o.MaxAge))
		l.m.dropped.WithLabelValues(dropExpired).Inc()
		return 0, l.delete(ctx, rec.Name, rec.ResourceVersion)
	}
	// Slack and every receiver are told side by side: one that hangs
	// until its timeout must not hold back the others, least of all the
	// message a person acts on. Each writes only its own part of the
	// record's state.
	var (
		escalated bool
		wg        sync.WaitGroup
	)
	if l.o.Escalator != nil {
		wg.Go(func() { escalated = l.escalate(ctx, rec) })
	}
	changed, retryAfter, failed := l.deliver(ctx, rec)
	wg.Wait()
	changed = changed || escalated
	if rec.State.Resolved != nil && l.everythingOut(rec) {
		return 0, l.delete(ctx, rec.Name, rec.ResourceVersion)
	}
	if changed {
		if err := l.saveProgress(ctx, rec); err != nil {
			return 0, err
		}
	}
	if failed {
		return retryAfter, errDelivery
	}
	return 0, readErr
}

// checkResolution reads the drift's objects and records its end, if it
// has ended. done: the record was changed (or deleted), and the update
// brings it back to the queue.
func (l *Ledger) checkResolution(ctx context.Context, rec *Record, now time.Time) (bool, error) {
	obs, err := l.observe(ctx, rec)
	if err != nil {
		return false, err
	}
	reason, ended := Resolve(rec, obs)
	until, snoozed := snoozedUntil(obs.Parent, now)
	if ended {
		l.m.resolved.WithLabelValues(reason).Inc()
		if snoozed && len(rec.State.Delivered) == 0 && rec.State.Slack == nil {
			// Held back by the snooze and over before anyone was told.
			l.m.suppressed.Inc()
			return true, l.delete(ctx, rec.Name, rec.ResourceVersion)
		}
		rec.State.Resolved = &Resolution{Reason: reason, At: metav1.NewTime(now)}
		return true, l.update(ctx, rec)
	}
	if snoozed && len(rec.State.Delivered) == 0 && rec.State.Slack == nil {
		l.enqueueAfter(rec.Name, until.Sub(now)+time.Second)
		return true, nil
	}
	return false, nil
}

// observe reads the parent and the child (from the informer caches when
// they hold them) and looks for newer drifts of the pair.
func (l *Ledger) observe(ctx context.Context, rec *Record) (Observed, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	sp := &rec.Report.Spec
	o := Observed{Now: l.o.Clock.Now(), CreateGrace: l.o.CreateGrace}
	var err error
	if o.Parent, err = l.read(ctx, sp.Parent.APIVersion, sp.Parent.Kind, sp.Parent.Namespace, sp.Parent.Name); err != nil {
		return o, err
	}
	if o.Child, err = l.readChild(ctx, sp.Child.APIVersion, sp.Child.Kind, sp.Child.Namespace, sp.Child.Name); err != nil {
		return o, err
	}
	for _, other := range l.pairRecords(PairHash(rec.Report)) {
		if other.Name == rec.Name || other.State.Resolved != nil {
			continue
		}
		if newer(other, rec) {
			o.Superseded = true
			break
		}
	}
	return o, nil
}

// newer orders two drifts of a pair: the later detection wins, the name
// breaks ties so two replicas agree.
func newer(a, b *Record) bool {
	if !a.State.DetectedAt.Equal(&b.State.DetectedAt) {
		return b.State.DetectedAt.Before(&a.State.DetectedAt)
	}
	return a.Name > b.Name
}

// read returns the object, nil when it does not exist. A parent of a kind
// the write path watches is read from its cache, which it waits for, so
// later changes arrive as events. Any other is read live: a drift's parent
// names a kind any caller may have named, which must not make the proxy
// cache every object of it (objects.Store.AdmitParents).
func (l *Ledger) read(ctx context.Context, apiVersion, kind, namespace, name string) (*unstructured.Unstructured, error) {
	// At the version the cluster prefers, as the decision read it: the
	// spec hash the record keeps is of that version's layout.
	gk := schema.FromAPIVersionAndKind(apiVersion, kind).GroupKind()
	if m, err := l.o.Objects.Mapping(gk.WithVersion("")); err == nil && l.o.Objects.CachesParentsOf(m.Resource) {
		// Kinds no informer may hold are read live and checked by the
		// periodic recheck instead.
		syncCtx, cancel := context.WithTimeout(ctx, readTimeout/2)
		_ = l.o.Objects.WaitForSync(syncCtx, m.Resource)
		cancel()
	}
	obj, _, err := l.o.Objects.GetKindShared(ctx, gk, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", kind, namespace, name, err)
	}
	return obj, nil
}

// readChild returns the child's metadata, nil when it does not exist:
// whether a drift ended needs only the child's identity, and a whole-object
// cache of every drifted kind would hold payloads the proxy never decides
// on. The first read of a kind starts its cache of metadata.
func (l *Ledger) readChild(ctx context.Context, apiVersion, kind, namespace, name string) (*unstructured.Unstructured, error) {
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	m, err := l.o.Objects.Mapping(gvk)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", kind, namespace, name, err)
	}
	syncCtx, cancel := context.WithTimeout(ctx, readTimeout/2)
	_ = l.o.Objects.WaitForMetadataSync(syncCtx, m.Resource)
	cancel()
	obj, _, err := l.o.Objects.GetMetadata(ctx, m.Resource, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", kind, namespace, name, err)
	}
	return obj, nil
}

// deliver posts to each receiver the phases it lacks, in order. It
// records what was acknowledged in rec.
func (l *Ledger) deliver(ctx context.Context, rec *Record) (changed bool, retryAfter time.Duration, failed bool) {
	if len(l.o.Receivers) == 0 {
		return false, 0, false
	}
	// Receivers are posted to side by side; each reports the phase it got
	// to, merged into the record afterwards.
	type outcome struct {
		key        string
		reached    v1alpha1.DriftReportPhase
		retryAfter time.Duration
		failed     bool
	}
	var (
		bodies   sync.Map // phase → []byte
		outcomes = make([]outcome, len(l.o.Receivers))
		wg       sync.WaitGroup
	)
	body := func(phase v1alpha1.DriftReportPhase) []byte {
		if b, ok := bodies.Load(phase); ok {
			return b.([]byte)
		}
		b, _ := bodies.LoadOrStore(phase, l.body(rec, phase))
		return b.([]byte)
	}
	for n, url := range l.o.Receivers {
		key := receiverKey(url)
		have := rec.State.Delivered[key]
		wg.Go(func() {
			outcomes[n] = outcome{key: key}
			outcomes[n].reached, outcomes[n].retryAfter, outcomes[n].failed = l.deliverTo(ctx, rec, url, key, have, body)
		})
	}
	wg.Wait()
	for _, o := range outcomes {
		if o.failed {
			failed, retryAfter = true, max(retryAfter, o.retryAfter)
		}
		if o.reached != rec.State.Delivered[o.key] {
			if rec.State.Delivered == nil {
				rec.State.Delivered = map[string]v1alpha1.DriftReportPhase{}
			}
			rec.State.Delivered[o.key] = o.reached
			changed = true
		}
	}
	return changed, retryAfter, failed
}

// deliverTo posts to the receiver at url the phases of rec it has not had
// since have, and returns the last one it took.
func (l *Ledger) deliverTo(ctx context.Context, rec *Record, url, key string, have v1alpha1.DriftReportPhase,
	body func(v1alpha1.DriftReportPhase) []byte) (reached v1alpha1.DriftReportPhase, retryAfter time.Duration, failed bool) {
	for {
		var phase v1alpha1.DriftReportPhase
		switch {
		case have == "":
			phase = v1alpha1.PhaseDetected
		case have == v1alpha1.PhaseDetected && rec.State.Resolved != nil:
			phase = v1alpha1.PhaseResolved
		}
		if phase == "" {
			return have, 0, false
		}
		ra, err := notify.Post(ctx, l.client, url, body(phase), l.o.ReceiverToken, l.o.Timeout)
		var de *notify.DeliveryError
		if errors.As(err, &de) && !de.Retryable {
			// The receiver's final answer: another attempt would get the
			// same. The phase counts as done for it.
			l.m.dropped.WithLabelValues(dropRejected).Inc()
			l.log.Warn("DriftReport rejected by a receiver; not retried", zap.String("id", rec.ID()),
				zap.String("phase", string(phase)), zap.String("receiver", key), zap.Int("code", de.Code))
			err = nil
		}
		if err != nil {
			l.m.retries.WithLabelValues(string(phase)).Inc()
			l.log.Info("DriftReport delivery failed; it will be retried", zap.String("id", rec.ID()),
				zap.String("phase", string(phase)), zap.String("receiver", key), zap.Error(err))
			return have, ra, true
		}
		l.m.sent.WithLabelValues(string(phase)).Inc()
		have = phase
	}
}

func (l *Ledger) body(rec *Record, phase v1alpha1.DriftReportPhase) []byte {
	r := rec.Report
	if phase == v1alpha1.PhaseResolved {
		r = resolvedReport(rec)
	}
	r.APIVersion, r.Kind = v1alpha1.DriftReportAPIVersion, v1alpha1.DriftReportKind
	b, err := json.Marshal(r)
	if err != nil { // cannot happen: the objects are raw JSON
		l.log.Error("cannot serialize a DriftReport", zap.String("id", rec.ID()), zap.Error(err))
	}
	return b
}

// escalate posts the message of an open drift, or marks the message of a
// resolved one. It reports whether rec changed.
func (l *Ledger) escalate(ctx context.Context, rec *Record) bool {
	switch {
	case rec.State.Slack == nil && rec.State.Resolved == nil && !rec.State.SlackSuppressed:
		ref, err := l.o.Escalator.Post(ctx, rec.Report)
		if errors.Is(err, escalation.ErrSuppressed) {
			l.m.escalations.WithLabelValues("suppressed").Inc()
			rec.State.SlackSuppressed = true
			return true
		}
		if err != nil {
			l.m.escalations.WithLabelValues("failed").Inc()
			l.log.Warn("cannot escalate a drift; it will be retried", zap.String("id", rec.ID()), zap.Error(err))
			return false
		}
		l.m.escalations.WithLabelValues("posted").Inc()
		rec.State.Slack = &ref
		return true
	case rec.State.Slack != nil && rec.State.Resolved != nil && !rec.State.SlackResolved:
		if err := l.o.Escalator.Resolve(ctx, *rec.State.Slack, resolvedReport(rec)); err != nil {
			l.m.escalations.WithLabelValues("failed").Inc()
			l.log.Warn("cannot mark an escalation resolved; it will be retried", zap.String("id", rec.ID()), zap.Error(err))
			return false
		}
		l.m.escalations.WithLabelValues("resolved").Inc()
		rec.State.SlackResolved = true
		return true
	}
	return false
}

// undeliveredSince says whether a phase of rec is still to be delivered,
// and since when: Detected since the drift was detected, Resolved since it
// ended. A drift whose Detected report is out stays open as long as it
// lasts (the quotas bound how many do): its record is what Slack clicks
// and kubectl kausality drifts read, and its Resolved report is still to
// come.
func (l *Ledger) undeliveredSince(rec *Record) (time.Time, bool) {
	if rec.State.Resolved != nil {
		return rec.State.Resolved.At.Time, !l.everythingOut(rec)
	}
	for _, url := range l.o.Receivers {
		if rec.State.Delivered[receiverKey(url)] == "" {
			return rec.State.DetectedAt.Time, true
		}
	}
	if l.o.Escalator != nil && rec.State.Slack == nil && !rec.State.SlackSuppressed {
		return rec.State.DetectedAt.Time, true
	}
	return time.Time{}, false
}

// everythingOut: every receiver has the Resolved report and the message,
// if any, says resolved.
func (l *Ledger) everythingOut(rec *Record) bool {
	for _, url := range l.o.Receivers {
		if rec.State.Delivered[receiverKey(url)] != v1alpha1.PhaseResolved {
			return false
		}
	}
	return l.o.Escalator == nil || rec.State.Slack == nil || rec.State.SlackResolved
}

// update writes rec back, conditional on the version it was read at.
func (l *Ledger) update(ctx context.Context, rec *Record) error {
	cm, err := encode(rec, l.o.Namespace)
	if err != nil {
		return err
	}
	_, err = l.o.Client.CoreV1().ConfigMaps(l.o.Namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: managedBy})
	if err != nil {
		return fmt.Errorf("updating drift record %s: %w", rec.Name, err)
	}
	l.wrote(rec.Name, rec.ResourceVersion)
	return nil
}

// staleRetry is how soon a record this replica just changed is looked at
// again.
const staleRetry = 200 * time.Millisecond

// wrote remembers that the version resourceVersion of a record is
// outdated: this replica replaced or deleted it.
func (l *Ledger) wrote(name, resourceVersion string) {
	l.mu.Lock()
	l.outdated[name] = resourceVersion
	l.mu.Unlock()
}

// stale reports whether cm is a version this replica has replaced.
func (l *Ledger) stale(cm *corev1.ConfigMap) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	rv, ok := l.outdated[cm.Name]
	if !ok {
		return false
	}
	if rv == cm.ResourceVersion {
		return true
	}
	delete(l.outdated, cm.Name)
	return false
}

// delete removes a record, conditional on the version it was read at.
func (l *Ledger) delete(ctx context.Context, name, resourceVersion string) error {
	err := l.o.Client.CoreV1().ConfigMaps(l.o.Namespace).Delete(ctx, name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &resourceVersion}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting drift record %s: %w", name, err)
	}
	l.wrote(name, resourceVersion)
	return nil
}

// saveProgress writes what rec's receivers and Slack were told. The record
// may have changed since it was read (a click on its Slack message claims
// itself on it): the progress is then merged into the record as stored,
// since dropping it would tell a receiver the same phase again.
func (l *Ledger) saveProgress(ctx context.Context, rec *Record) error {
	for attempt := 0; ; attempt++ {
		err := l.update(ctx, rec)
		if !apierrors.IsConflict(err) || attempt == 3 {
			return err
		}
		cm, gerr := l.o.Client.CoreV1().ConfigMaps(l.o.Namespace).Get(ctx, rec.Name, metav1.GetOptions{})
		if gerr != nil {
			return err
		}
		stored, derr := decode(cm)
		if derr != nil || !mergeProgress(stored, rec) {
			// Another drift's record now, or this one detected again:
			// its own progress starts over.
			return err
		}
		rec = stored
	}
}

// mergeProgress adds to stored what ours records of the same detection
// as delivered or escalated, and reports whether stored is that
// detection's record.
func mergeProgress(stored, ours *Record) bool {
	if stored.ID() != ours.ID() || !stored.State.DetectedAt.Equal(&ours.State.DetectedAt) {
		return false
	}
	for key, phase := range ours.State.Delivered {
		if phaseOrder(phase) > phaseOrder(stored.State.Delivered[key]) && (phase != v1alpha1.PhaseResolved || stored.State.Resolved != nil) {
			if stored.State.Delivered == nil {
				stored.State.Delivered = map[string]v1alpha1.DriftReportPhase{}
			}
			stored.State.Delivered[key] = phase
		}
	}
	if stored.State.Slack == nil && ours.State.Slack != nil {
		stored.State.Slack = ours.State.Slack
	}
	if ours.State.SlackResolved && stored.State.Resolved != nil && stored.State.Slack != nil && ours.State.Slack != nil && *stored.State.Slack == *ours.State.Slack {
		stored.State.SlackResolved = true
	}
	stored.State.SlackSuppressed = stored.State.SlackSuppressed || ours.State.SlackSuppressed
	return true
}

// phaseOrder orders the phases a receiver is told.
func phaseOrder(p v1alpha1.DriftReportPhase) int {
	switch p {
	case v1alpha1.PhaseDetected:
		return 1
	case v1alpha1.PhaseResolved:
		return 2
	}
	return 0
}
