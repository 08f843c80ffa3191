// Package policywatch watches one kind of policy (ApprovalPolicy,
// ClusterApprovalPolicy, AllowancePolicy) with the proxy's credentials,
// compiles each once per generation, hands the compiled policies to
// decisions without I/O, and writes each policy's Ready condition back
// when what the proxy has to say about it changes.
package policywatch

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Kind says how to watch, compile and report on one policy kind. C is
// the compiled policy, P a problem an evaluation of it ran into.
type Kind[C any, P comparable] struct {
	// Name is the kind as log lines name it, e.g. "approval policy".
	Name     string
	GVR      schema.GroupVersionResource
	Indexers cache.Indexers
	Compile  func(*unstructured.Unstructured) C
	// Ready is the Ready condition of stored, compiled as c, whose
	// current generation's evaluations ran into exceeded.
	Ready func(stored *unstructured.Unstructured, c C, exceeded []P) metav1.Condition
	// Less orders the snapshot All returns; nil when All is not used.
	Less func(a, b C) int
	// FieldManager owns the status writes.
	FieldManager string
}

// Watcher serves one policy kind. Until its cache has synced it has no
// policies.
type Watcher[C any, P comparable] struct {
	kind     Kind[C, P]
	dyn      dynamic.Interface
	informer informers.GenericInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *zap.Logger

	mu       sync.Mutex
	compiled map[types.UID]compiledAt[C]
	// exceeded holds, per policy key, the problems evaluations of its
	// current generation ran into (cost limits, a write's budget): they
	// stay in its status until its spec changes.
	exceeded map[string]problemsAt[P]

	// snapshot is every compiled policy in Less order, rebuilt on the
	// first read after the cache changed, so that a write never sorts.
	snapshot atomic.Pointer[[]C]
	stale    atomic.Bool

	// unserved is set when kube-apiserver answers 404 for the kind (its
	// CRD is not installed): the informer never syncs, and there are no
	// policies to wait for.
	unserved atomic.Bool
}

type compiledAt[C any] struct {
	generation int64
	name       string
	compiled   C
}

type problemsAt[P comparable] struct {
	generation int64
	problems   []P
}

// New returns the watcher of kind; Run starts it.
func New[C any, P comparable](dyn dynamic.Interface, kind Kind[C, P], log *zap.Logger) *Watcher[C, P] {
	w := &Watcher[C, P]{
		kind:     kind,
		dyn:      dyn,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		log:      log,
		compiled: map[types.UID]compiledAt[C]{},
		exceeded: map[string]problemsAt[P]{},
	}
	w.stale.Store(true)
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	for name, index := range kind.Indexers {
		indexers[name] = index
	}
	w.informer = dynamicinformer.NewFilteredDynamicInformer(dyn, kind.GVR, metav1.NamespaceAll, 0, indexers, nil)
	_, _ = w.informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.changed,
		UpdateFunc: func(_, obj any) { w.changed(obj) },
		DeleteFunc: w.deleted,
	})
	return w
}

func (w *Watcher[C, P]) changed(obj any) {
	w.stale.Store(true)
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		w.queue.Add(key)
	}
}

func (w *Watcher[C, P]) deleted(obj any) {
	w.stale.Store(true)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(u)
	w.mu.Lock()
	delete(w.compiled, u.GetUID())
	delete(w.exceeded, key)
	w.mu.Unlock()
}

// Run starts the informer and the status writer until ctx is done.
func (w *Watcher[C, P]) Run(ctx context.Context) {
	_ = w.informer.Informer().SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		w.unserved.Store(apierrors.IsNotFound(err))
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	go w.informer.Informer().RunWithContext(ctx)
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	go func() {
		for w.processNext(ctx) {
		}
	}()
}

// HasSynced reports whether the cache holds what kube-apiserver has (or
// kube-apiserver serves no policies of the kind).
func (w *Watcher[C, P]) HasSynced() bool {
	return w.informer.Informer().HasSynced() || w.unserved.Load()
}

// Get returns the compiled policy stored under key ("ns/name" or
// "name"). It does no I/O.
func (w *Watcher[C, P]) Get(key string) (C, bool) {
	var none C
	if !w.informer.Informer().HasSynced() {
		return none, false
	}
	obj, exists, err := w.informer.Informer().GetIndexer().GetByKey(key)
	u, ok := obj.(*unstructured.Unstructured)
	if err != nil || !exists || !ok {
		return none, false
	}
	return w.compile(u), true
}

// ByIndex returns the compiled policies the named indexer of the Kind
// files under value, in Less order when the Kind has one. It does no I/O.
func (w *Watcher[C, P]) ByIndex(index, value string) []C {
	if !w.informer.Informer().HasSynced() {
		return nil
	}
	objs, _ := w.informer.Informer().GetIndexer().ByIndex(index, value)
	return w.compileAll(objs)
}

// All returns every compiled policy, invalid ones included, in Less
// order. The slice is shared between callers and must not be changed. It
// does no I/O unless the cache changed since the last call.
func (w *Watcher[C, P]) All() []C {
	if !w.informer.Informer().HasSynced() {
		return nil
	}
	if w.stale.Swap(false) {
		all := w.compileAll(w.informer.Informer().GetStore().List())
		w.snapshot.Store(&all)
	}
	if s := w.snapshot.Load(); s != nil {
		return *s
	}
	return nil
}

func (w *Watcher[C, P]) compileAll(objs []any) []C {
	out := make([]C, 0, len(objs))
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			out = append(out, w.compile(u))
		}
	}
	if w.kind.Less != nil {
		slices.SortFunc(out, w.kind.Less)
	}
	return out
}

// compile returns u compiled, compiling only when its generation is new:
// status writes do not bump it.
func (w *Watcher[C, P]) compile(u *unstructured.Unstructured) C {
	w.mu.Lock()
	got, ok := w.compiled[u.GetUID()]
	w.mu.Unlock()
	if ok && got.generation == u.GetGeneration() && got.name == u.GetName() {
		return got.compiled
	}
	compiled := w.kind.Compile(u)
	w.mu.Lock()
	w.compiled[u.GetUID()] = compiledAt[C]{generation: u.GetGeneration(), name: u.GetName(), compiled: compiled}
	w.mu.Unlock()
	return compiled
}

// Report records a problem an evaluation of generation of the policy
// stored under key ran into, for its status.
func (w *Watcher[C, P]) Report(key string, generation int64, problem P) {
	w.mu.Lock()
	cur := w.exceeded[key]
	if cur.generation != generation {
		cur = problemsAt[P]{generation: generation}
	}
	known := slices.Contains(cur.problems, problem)
	if !known {
		cur.problems = append(cur.problems, problem)
		w.exceeded[key] = cur
	}
	w.mu.Unlock()
	if !known {
		w.queue.Add(key)
	}
}

func (w *Watcher[C, P]) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.syncStatus(ctx, key); err != nil {
		w.log.Info("cannot write the status of an "+w.kind.Name+"; retrying", zap.String("policy", key), zap.Error(err))
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// syncStatus writes the Ready condition of one policy when it differs from
// the stored one, with the resourceVersion it was computed on as a
// precondition: a conflict means a newer version is on its way through
// the informer, and will be synced again.
func (w *Watcher[C, P]) syncStatus(ctx context.Context, key string) error {
	obj, exists, err := w.informer.Informer().GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil
	}
	stored, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	compiled := w.compile(stored)
	w.mu.Lock()
	var exceeded []P
	if e, ok := w.exceeded[key]; ok && e.generation == stored.GetGeneration() {
		exceeded = slices.Clone(e.problems)
	}
	w.mu.Unlock()
	want := w.kind.Ready(stored, compiled, exceeded)

	var status struct {
		Conditions []metav1.Condition `json:"conditions,omitempty"`
	}
	raw, _, _ := unstructured.NestedMap(stored.Object, "status")
	if raw != nil {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status)
	}
	if have := meta.FindStatusCondition(status.Conditions, want.Type); have != nil &&
		have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message && have.ObservedGeneration == want.ObservedGeneration {
		return nil
	}
	meta.SetStatusCondition(&status.Conditions, want)
	conditions, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	updated := stored.DeepCopy()
	if raw == nil {
		raw = map[string]any{}
	}
	raw = runtime.DeepCopyJSON(raw)
	raw["conditions"] = conditions["conditions"]
	updated.Object["status"] = raw
	var ri dynamic.ResourceInterface = w.dyn.Resource(w.kind.GVR)
	if ns := stored.GetNamespace(); ns != "" {
		ri = w.dyn.Resource(w.kind.GVR).Namespace(ns)
	}
	_, err = ri.UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: w.kind.FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
