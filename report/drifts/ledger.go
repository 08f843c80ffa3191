package drifts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/report/escalation"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// Defaults of Options.
const (
	DefaultNamespace      = "kausality-system"
	DefaultLeaseName      = "kausality-proxy-driftreports"
	DefaultTimeout        = 10 * time.Second
	DefaultQueueSize      = 1000
	DefaultMaxRecords     = 5000
	DefaultMaxAge         = 24 * time.Hour
	DefaultRecheck        = 30 * time.Second
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
	senders               = 4
)

// Objects reads parents and children, and tells about their changes.
// *objects.Store implements it.
type Objects interface {
	GetKindShared(ctx context.Context, gk schema.GroupKind, namespace, name string) (*unstructured.Unstructured, objects.Source, error)
	GetMetadata(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, objects.Source, error)
	Mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error)
	CachesParentsOf(gvr schema.GroupVersionResource) bool
	WaitForSync(ctx context.Context, gvr schema.GroupVersionResource) error
	WaitForMetadataSync(ctx context.Context, gvr schema.GroupVersionResource) error
	AddObserver(o objects.Observer)
}

// Escalator tells a person about a drift and updates the message when the
// drift ends. *escalation.Escalator implements it.
type Escalator interface {
	Post(ctx context.Context, r v1alpha1.DriftReport) (escalation.MessageRef, error)
	Resolve(ctx context.Context, ref escalation.MessageRef, r v1alpha1.DriftReport) error
}

// Options configure a Ledger. Zero values mean the defaults.
type Options struct {
	// Client holds the proxy's own credentials: records and the Lease.
	Client kubernetes.Interface
	// Namespace holds the records and the Lease.
	Namespace string
	// LeaseName names the Lease whose holder sends.
	LeaseName string
	// Identity of this replica in the Lease (default: host name plus a
	// random suffix).
	Identity string
	Objects  Objects
	// Receivers get the DriftReports (--drift-webhook-url).
	Receivers []string
	// ReceiverToken, if set, is sent to the receivers as a bearer token.
	ReceiverToken string
	// Timeout bounds each POST.
	Timeout time.Duration
	// HTTPClient posts the reports (nil: one that follows no redirect).
	HTTPClient *http.Client
	// Escalator, if set, escalates each drift to a person.
	Escalator Escalator
	// Backoff between delivery attempts of one record.
	Backoff notify.Backoff
	// MaxAge: a record whose phase is still undelivered this long after it
	// began (the detection, or the drift's end) is given up (dropped,
	// counted and logged). A delivered open drift is kept while it lasts.
	MaxAge time.Duration
	// Quotas bound the records per controller, per parent and in all;
	// zero fields are the defaults (Total: DefaultMaxRecords).
	Quotas Quotas
	// ControllerRate (new drifts per second) and ControllerBurst limit
	// the drifts one controller may have recorded.
	ControllerRate  float64
	ControllerBurst int
	// FloodQuiet: a controller's flood of suppressed drifts is over once
	// nothing of it was suppressed for this long.
	FloodQuiet time.Duration
	// CreateGrace: the drift of a denied create whose child still does not
	// exist this long after detection is over.
	CreateGrace time.Duration
	// QueueSize bounds the drifts waiting to be recorded.
	QueueSize int
	// Recheck is how often every open drift is checked even without an
	// informer event (objects no informer holds, such as Secrets).
	Recheck time.Duration
	// Leader election timings.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Clock                                     clock.WithTicker
	Log                                       *zap.Logger
	Registerer                                prometheus.Registerer
}

// Ledger records drifts and, on the replica that leads, sends them.
type Ledger struct {
	o       Options
	log     *zap.Logger
	m       *metrics
	client  *http.Client
	records cache.SharedIndexInformer
	factory informers.SharedInformerFactory
	// election elects the replica that sends.
	election leaderelection.LeaderElectionConfig

	intake    chan *Record
	closeOnce sync.Once
	closed    chan struct{}
	recorded  chan struct{} // closed when the recorder has drained intake

	mu    sync.RWMutex
	queue workqueue.TypedRateLimitingInterface[string] // nil unless leading
	byUID map[types.UID]map[string]bool
	// outdated maps a record to the version of it this replica last
	// replaced or deleted.
	outdated map[string]string
	lastLog  time.Time
	// namespaceMissing: a drift is waiting for the proxy's namespace.
	namespaceMissing bool
	// controllers holds the rate limits and floods by controller key.
	controllers map[string]*controllerState
	// pending are the records this replica created that the informer
	// has not shown yet: the quotas count them too.
	pending map[string]pendingRecord
}

// New returns a Ledger. It does nothing until Run.
func New(o Options) (*Ledger, error) {
	if o.Client == nil || o.Objects == nil {
		return nil, errors.New("drift ledger: a client and an object reader are required")
	}
	setDefaults(&o)
	for i, u := range o.Receivers {
		if err := notify.ValidateURL(u); err != nil {
			return nil, fmt.Errorf("drift webhook URL #%d: %w", i, err)
		}
	}
	l := &Ledger{
		o: o, log: o.Log.Named("driftreports"), m: newMetrics(),
		intake: make(chan *Record, o.QueueSize), closed: make(chan struct{}), recorded: make(chan struct{}),
		byUID: map[types.UID]map[string]bool{}, outdated: map[string]string{},
		controllers: map[string]*controllerState{}, pending: map[string]pendingRecord{},
	}
	l.client = o.HTTPClient
	if l.client == nil {
		l.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Registerer != nil {
		if err := l.m.register(o.Registerer, l); err != nil {
			return nil, fmt.Errorf("registering drift report metrics: %w", err)
		}
	}
	selector := labels.SelectorFromSet(labels.Set{ManagedByLabel: managedBy, ComponentLabel: component}).String()
	l.factory = informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithNamespace(o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector }))
	l.records = l.factory.Core().V1().ConfigMaps().Informer()
	if err := l.records.AddIndexers(cache.Indexers{
		pairIndex:       labelIndex(PairLabel),
		controllerIndex: labelIndex(ControllerLabel),
		parentIndex:     labelIndex(ParentLabel),
		namespaceIndex:  labelIndex(NamespaceLabel),
	}); err != nil {
		return nil, err
	}
	_, _ = l.records.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { l.recordChanged(obj, false) },
		UpdateFunc: func(_, obj interface{}) { l.recordChanged(obj, false) },
		DeleteFunc: func(obj interface{}) { l.recordChanged(obj, true) },
	})
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.o.Namespace, Name: l.o.LeaseName},
		Client:     l.o.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.o.Identity},
	}
	l.election = leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   l.o.LeaseDuration,
		RenewDeadline:   l.o.RenewDeadline,
		RetryPeriod:     l.o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            l.o.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: l.lead,
			OnStoppedLeading: func() {},
		},
	}
	if _, err := leaderelection.NewLeaderElector(l.election); err != nil {
		return nil, fmt.Errorf("the election of the replica that sends DriftReports: %w", err)
	}
	o.Objects.AddObserver(objectEvents{l})
	return l, nil
}

// Indexes of the records.
const (
	pairIndex       = "pair"
	controllerIndex = "controller"
	parentIndex     = "parent"
	namespaceIndex  = "drift-namespace"
)

func labelIndex(label string) cache.IndexFunc {
	return func(obj interface{}) ([]string, error) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			if v := cm.Labels[label]; v != "" {
				return []string{v}, nil
			}
		}
		return nil, nil
	}
}

func setDefaults(o *Options) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.LeaseName == "" {
		o.LeaseName = DefaultLeaseName
	}
	if o.Identity == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.Identity = host + "-" + hex.EncodeToString(b[:])
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.Timeout, DefaultTimeout}, {&o.MaxAge, DefaultMaxAge}, {&o.Recheck, DefaultRecheck},
		{&o.Backoff.Initial, DefaultBackoffInitial}, {&o.Backoff.Max, DefaultBackoffMax},
		{&o.LeaseDuration, DefaultLeaseDuration}, {&o.RenewDeadline, DefaultRenewDeadline}, {&o.RetryPeriod, DefaultRetryPeriod}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&o.Quotas.ControllerRecords, DefaultControllerRecords}, {&o.Quotas.ParentRecords, DefaultParentRecords},
		{&o.Quotas.Total, DefaultMaxRecords}, {&o.ControllerBurst, DefaultControllerBurst}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if o.Quotas.ControllerBytes <= 0 {
		o.Quotas.ControllerBytes = DefaultControllerBytes
	}
	if o.Quotas.ParentBytes <= 0 {
		o.Quotas.ParentBytes = DefaultParentBytes
	}
	if o.ControllerRate <= 0 {
		o.ControllerRate = DefaultControllerRate
	}
	if o.FloodQuiet <= 0 {
		o.FloodQuiet = DefaultFloodQuiet
	}
	if o.CreateGrace <= 0 {
		o.CreateGrace = DefaultCreateGrace
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
}

// Run records drifts and takes part in the election of the sender until
// ctx is done.
func (l *Ledger) Run(ctx context.Context) {
	if l == nil {
		return
	}
	l.factory.Start(ctx.Done())
	go l.record(ctx)
	go func() {
		// A term ends when the Lease is lost; stand again, with a fresh
		// elector, until ctx is done.
		for ctx.Err() == nil {
			elector, err := leaderelection.NewLeaderElector(l.election)
			if err != nil {
				l.log.Error("DriftReports cannot be sent: the sender election is misconfigured", zap.Error(err))
				return
			}
			elector.Run(ctx)
		}
	}()
}

// Shutdown stops taking drifts and records the ones taken within ctx.
func (l *Ledger) Shutdown(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.closeOnce.Do(func() { close(l.closed) })
	select {
	case <-l.recorded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leading reports whether this replica sends.
func (l *Ledger) Leading() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.queue != nil
}

// lead sends while this replica holds the Lease.
func (l *Ledger) lead(ctx context.Context) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](l.o.Backoff.Initial, l.o.Backoff.Max),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "driftreports"})
	l.mu.Lock()
	l.queue = q
	l.mu.Unlock()
	l.m.leader.Set(1)
	l.log.Info("sending DriftReports: this replica holds the lease", zap.String("identity", l.o.Identity))
	defer func() {
		l.mu.Lock()
		l.queue = nil
		l.mu.Unlock()
		l.m.leader.Set(0)
		q.ShutDown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), l.records.HasSynced) {
		return
	}
	l.enqueueAll()
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l.processNext(ctx, q) {
			}
		}()
	}
	ticker := l.o.Clock.NewTicker(l.o.Recheck)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			q.ShutDown()
			wg.Wait()
			return
		case <-ticker.C():
			l.enqueueAll()
		}
	}
}

func (l *Ledger) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	name, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(name)
	retryAfter, err := l.reconcile(ctx, name)
	switch {
	case err != nil && retryAfter > 0:
		q.AddAfter(name, min(retryAfter, l.o.Backoff.Max))
	case err != nil:
		q.AddRateLimited(name)
	default:
		q.Forget(name)
	}
	return true
}

// enqueue asks the sender, if this replica is it, to look at a record.
func (l *Ledger) enqueue(name string) {
	l.mu.RLock()
	q := l.queue
	l.mu.RUnlock()
	if q != nil {
		q.Add(name)
	}
}

func (l *Ledger) enqueueAfter(name string, d time.Duration) {
	l.mu.RLock()
	q := l.queue
	l.mu.RUnlock()
	if q != nil {
		q.AddAfter(name, d)
	}
}

func (l *Ledger) enqueueAll() {
	for _, key := range l.records.GetStore().ListKeys() {
		_, name, _ := cache.SplitMetaNamespaceKey(key)
		l.enqueue(name)
	}
}

// recordChanged keeps the index from object UIDs to records, so an event
// about a parent or a child reaches the records it concerns.
func (l *Ledger) recordChanged(obj interface{}, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	r, err := decode(cm)
	l.mu.Lock()
	delete(l.pending, cm.Name)
	if deleted {
		delete(l.outdated, cm.Name)
	}
	//nolint:nestif // the uid index is kept in step with the record: removed on delete, added otherwise
	if err == nil {
		for _, uid := range []string{r.Report.Spec.Parent.UID, r.Report.Spec.Child.UID} {
			if uid == "" {
				continue
			}
			names := l.byUID[types.UID(uid)]
			if deleted {
				delete(names, cm.Name)
				if len(names) == 0 {
					delete(l.byUID, types.UID(uid))
				}
				continue
			}
			if names == nil {
				names = map[string]bool{}
				l.byUID[types.UID(uid)] = names
			}
			names[cm.Name] = true
		}
	}
	l.mu.Unlock()
	if !deleted {
		l.enqueue(cm.Name)
		// A new drift of a pair may supersede the older ones.
		if err == nil && r.State.Resolved == nil {
			for _, other := range l.pairRecords(cm.Labels[PairLabel]) {
				if other.Name != cm.Name {
					l.enqueue(other.Name)
				}
			}
		}
	}
}

// objectEvents turns changes of parents and children into work for the
// sender.
type objectEvents struct{ l *Ledger }

func (e objectEvents) Observe(obj *unstructured.Unstructured) { e.touch(obj.GetUID()) }

func (e objectEvents) Forget(uid types.UID) { e.touch(uid) }

// ObserveMetadata hears of children too: a drift ends when the child
// changes back as much as when the parent moves on.
func (e objectEvents) ObserveMetadata(obj metav1.Object) { e.touch(obj.GetUID()) }

func (e objectEvents) touch(uid types.UID) {
	e.l.mu.RLock()
	names := e.l.byUID[uid]
	var list []string
	if len(names) > 0 && e.l.queue != nil {
		list = make([]string, 0, len(names))
		for n := range names {
			list = append(list, n)
		}
	}
	e.l.mu.RUnlock()
	for _, n := range list {
		e.l.enqueue(n)
	}
}

// pairRecords returns the records of a pair.
func (l *Ledger) pairRecords(pair string) []*Record {
	objs, err := l.records.GetIndexer().ByIndex(pairIndex, pair)
	if err != nil {
		return nil
	}
	out := make([]*Record, 0, len(objs))
	for _, obj := range objs {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			if r, err := decode(cm); err == nil {
				out = append(out, r)
			}
		}
	}
	return out
}
