// The allowance policies: watched through an informer with the proxy's
// credentials, compiled once per generation, handed to decisions without
// I/O, and their Ready condition written back when it changes.

package intercept

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
)

// AllowancePolicies watches AllowancePolicies. Until its cache has synced
// it has no policies: without them nothing is granted, and a controller's
// write under an allowance-checked parent is a violation, the strict side.
type AllowancePolicies struct {
	dyn      dynamic.Interface
	informer informers.GenericInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *zap.Logger

	mu       sync.Mutex
	compiled map[types.UID]*allowance.Compiled
	// exceeded holds, per policy name, the problems evaluations of its
	// current generation ran into (cost limits, the write's budget): they
	// stay in its status until its spec changes.
	exceeded map[string]allowanceProblemsAt
	// unserved is set when kube-apiserver answers 404 for the kind (its
	// CRD is not installed): the informer never syncs, and there are no
	// policies to wait for.
	unserved atomic.Bool
}

type allowanceProblemsAt struct {
	generation int64
	problems   []allowance.Problem
}

// NewAllowancePolicies returns the watcher; Run starts it.
func NewAllowancePolicies(dyn dynamic.Interface, log *zap.Logger) *AllowancePolicies {
	p := &AllowancePolicies{
		dyn:      dyn,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		log:      log,
		compiled: map[types.UID]*allowance.Compiled{},
		exceeded: map[string]allowanceProblemsAt{},
	}
	p.informer = dynamicinformer.NewFilteredDynamicInformer(dyn, v1alpha1.AllowancePoliciesGVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil)
	_, _ = p.informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.enqueue,
		UpdateFunc: func(_, obj any) { p.enqueue(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				p.mu.Lock()
				delete(p.compiled, u.GetUID())
				delete(p.exceeded, u.GetName())
				p.mu.Unlock()
			}
		},
	})
	return p
}

func (p *AllowancePolicies) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		p.queue.Add(key)
	}
}

// Run starts the informer and the status writer until ctx is done.
func (p *AllowancePolicies) Run(ctx context.Context) {
	_ = p.informer.Informer().SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		p.unserved.Store(apierrors.IsNotFound(err))
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	go p.informer.Informer().RunWithContext(ctx)
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	go func() {
		for p.processNext(ctx) {
		}
	}()
}

// HasSynced reports whether the cache holds what kube-apiserver has (or
// kube-apiserver serves no AllowancePolicies).
func (p *AllowancePolicies) HasSynced() bool {
	return p.informer.Informer().HasSynced() || p.unserved.Load()
}

// All returns every compiled policy, invalid ones included (the allowance
// package never lets those apply, and names them when a write needs
// them), by name. It does no I/O.
func (p *AllowancePolicies) All() []*allowance.Compiled {
	if !p.informer.Informer().HasSynced() {
		return nil
	}
	objs := p.informer.Informer().GetStore().List()
	out := make([]*allowance.Compiled, 0, len(objs))
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			out = append(out, p.compile(u))
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// compile returns u compiled, compiling CEL only when its generation is new.
func (p *AllowancePolicies) compile(u *unstructured.Unstructured) *allowance.Compiled {
	p.mu.Lock()
	got, ok := p.compiled[u.GetUID()]
	p.mu.Unlock()
	if ok && got.Generation == u.GetGeneration() && got.Name == u.GetName() {
		return got
	}
	compiled := allowance.Compile(u)
	p.mu.Lock()
	p.compiled[u.GetUID()] = compiled
	p.mu.Unlock()
	return compiled
}

// Report records problems evaluations ran into, for the policies' status.
func (p *AllowancePolicies) Report(problems []allowance.EvalProblem) {
	for _, pr := range problems {
		p.mu.Lock()
		cur := p.exceeded[pr.Policy]
		if cur.generation != pr.Generation {
			cur = allowanceProblemsAt{generation: pr.Generation}
		}
		known := false
		for _, q := range cur.problems {
			known = known || q == pr.Problem
		}
		if !known {
			cur.problems = append(cur.problems, pr.Problem)
			p.exceeded[pr.Policy] = cur
		}
		p.mu.Unlock()
		if !known {
			p.queue.Add(pr.Policy)
		}
	}
}

func (p *AllowancePolicies) processNext(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	if err := p.syncStatus(ctx, key); err != nil {
		p.log.Info("cannot write the status of an allowance policy; retrying", zap.String("policy", key), zap.Error(err))
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	return true
}

// syncStatus writes the Ready condition of one policy when it differs from
// the stored one, with the resourceVersion it was computed on as a
// precondition: a conflict means a newer version is on its way through
// the informer, and will be synced again.
func (p *AllowancePolicies) syncStatus(ctx context.Context, key string) error {
	obj, exists, err := p.informer.Informer().GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil
	}
	stored, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	compiled := p.compile(stored)
	p.mu.Lock()
	var extra []allowance.Problem
	if e, ok := p.exceeded[stored.GetName()]; ok && e.generation == stored.GetGeneration() {
		extra = e.problems
	}
	p.mu.Unlock()
	want := allowance.StatusCondition(compiled, extra...)

	var status v1alpha1.AllowancePolicyStatus
	if raw, found, _ := unstructured.NestedMap(stored.Object, "status"); found {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status)
	}
	if have := meta.FindStatusCondition(status.Conditions, want.Type); have != nil &&
		have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message && have.ObservedGeneration == want.ObservedGeneration {
		return nil
	}
	meta.SetStatusCondition(&status.Conditions, want)
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	updated := stored.DeepCopy()
	updated.Object["status"] = raw
	_, err = p.dyn.Resource(v1alpha1.AllowancePoliciesGVR).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
