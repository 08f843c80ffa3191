// The approval policies: watched through informers with the proxy's
// credentials, compiled once per generation, handed to decisions without
// I/O, and their status written back when what the proxy has to say about
// them changes.

package intercept

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"

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
	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

// PolicySource gives decisions the approval policies of a writer, and
// takes back what their evaluation found.
type PolicySource interface {
	// For returns the compiled policies that apply to user, namespaced
	// first, then cluster policies by name. It does no I/O.
	For(user string) []*policy.Compiled
	// Report records evaluations that exceeded the cost limit or a
	// write's budget, for the policies' status.
	Report(problems []policy.EvalProblem)
}

// byServiceAccount indexes ClusterApprovalPolicies by the service
// accounts they name ("ns/name").
const byServiceAccount = "serviceAccount"

type policyKey struct {
	cluster bool
	key     string // ns/name or name
}

// Policies watches ApprovalPolicies and ClusterApprovalPolicies. Until its
// caches have synced it has no policies: a policy only approves, so
// deciding without it is the strict side.
type Policies struct {
	dyn        dynamic.Interface
	namespaced informers.GenericInformer
	cluster    informers.GenericInformer
	compiled   *policy.Cache
	queue      workqueue.TypedRateLimitingInterface[policyKey]
	log        *zap.Logger

	mu sync.Mutex
	// exceeded holds, per policy UID, the cost-limit and budget problems
	// of its current generation: they stay in its status until its spec
	// changes.
	exceeded map[types.UID]exceededAt
	// unserved says which policy kinds kube-apiserver does not serve.
	unserved unservedKinds
}

type exceededAt struct {
	generation int64
	problems   []policy.Problem
}

// NewPolicies returns the watcher; Run starts it.
func NewPolicies(dyn dynamic.Interface, log *zap.Logger) *Policies {
	p := &Policies{
		dyn:      dyn,
		compiled: policy.NewCache(),
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[policyKey]()),
		log:      log,
		exceeded: map[types.UID]exceededAt{},
	}
	p.namespaced = dynamicinformer.NewFilteredDynamicInformer(dyn, v1alpha1.ApprovalPoliciesGVR, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil)
	p.cluster = dynamicinformer.NewFilteredDynamicInformer(dyn, v1alpha1.ClusterApprovalPoliciesGVR, metav1.NamespaceAll, 0,
		cache.Indexers{byServiceAccount: serviceAccountIndex}, nil)
	for _, inf := range []struct {
		informers.GenericInformer
		cluster bool
	}{{p.namespaced, false}, {p.cluster, true}} {
		cluster := inf.cluster
		_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { p.enqueue(cluster, obj) },
			UpdateFunc: func(_, obj any) { p.enqueue(cluster, obj) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if u, ok := obj.(*unstructured.Unstructured); ok {
					p.compiled.Forget(u.GetUID())
					p.mu.Lock()
					delete(p.exceeded, u.GetUID())
					p.mu.Unlock()
				}
			},
		})
	}
	return p
}

func serviceAccountIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	sas, _, _ := unstructured.NestedSlice(u.Object, "spec", "serviceAccounts")
	var out []string
	for _, sa := range sas {
		m, _ := sa.(map[string]any)
		ns, _ := m["namespace"].(string)
		name, _ := m["name"].(string)
		if ns != "" && name != "" {
			out = append(out, ns+"/"+name)
		}
	}
	return out, nil
}

func (p *Policies) enqueue(cluster bool, obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		p.queue.Add(policyKey{cluster: cluster, key: key})
	}
}

// Run starts the informers and the status writer until ctx is done.
func (p *Policies) Run(ctx context.Context) {
	// A policy met first by a write would otherwise pay for building the
	// CEL environment on the write path.
	go policy.Warm()
	p.trackUnserved()
	go p.namespaced.Informer().RunWithContext(ctx)
	go p.cluster.Informer().RunWithContext(ctx)
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	go func() {
		for p.processNext(ctx) {
		}
	}()
}

// For implements PolicySource.
func (p *Policies) For(user string) []*policy.Compiled {
	sa, ok := policy.ServiceAccountOf(user)
	if !ok {
		return nil
	}
	var out []*policy.Compiled
	if p.namespaced.Informer().HasSynced() {
		obj, exists, err := p.namespaced.Informer().GetIndexer().GetByKey(sa.Namespace + "/" + sa.Name)
		if u, ok := obj.(*unstructured.Unstructured); err == nil && exists && ok {
			out = append(out, p.compiled.Get(u))
		}
	}
	if p.cluster.Informer().HasSynced() {
		objs, _ := p.cluster.Informer().GetIndexer().ByIndex(byServiceAccount, sa.Namespace+"/"+sa.Name)
		var cluster []*policy.Compiled
		for _, obj := range objs {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				cluster = append(cluster, p.compiled.Get(u))
			}
		}
		sort.Slice(cluster, func(a, b int) bool { return cluster[a].Ref.Name < cluster[b].Ref.Name })
		out = append(out, cluster...)
	}
	return out
}

// Report implements PolicySource.
func (p *Policies) Report(problems []policy.EvalProblem) {
	for _, pr := range problems {
		uid := types.UID(pr.UID)
		p.mu.Lock()
		cur := p.exceeded[uid]
		if cur.generation != pr.Generation {
			cur = exceededAt{generation: pr.Generation}
		}
		known := false
		for _, q := range cur.problems {
			known = known || q == pr.Problem
		}
		if !known {
			cur.problems = append(cur.problems, pr.Problem)
			p.exceeded[uid] = cur
		}
		p.mu.Unlock()
		if !known {
			key := pr.Policy.Name
			if pr.Policy.Namespace != "" {
				key = pr.Policy.Namespace + "/" + key
			}
			p.queue.Add(policyKey{cluster: pr.Policy.Kind == v1alpha1.ClusterApprovalPolicyKind, key: key})
		}
	}
}

func (p *Policies) processNext(ctx context.Context) bool {
	k, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(k)
	if err := p.syncStatus(ctx, k); err != nil {
		p.log.Info("cannot write the status of an approval policy; retrying", zap.String("policy", k.key), zap.Error(err))
		p.queue.AddRateLimited(k)
		return true
	}
	p.queue.Forget(k)
	return true
}

// syncStatus writes the Ready condition of one policy when it differs from
// the stored one, with the resourceVersion it was computed on as a
// precondition: a conflict means a newer version is on its way through
// the informer, and will be synced again.
func (p *Policies) syncStatus(ctx context.Context, k policyKey) error {
	inf, gvr := p.namespaced, v1alpha1.ApprovalPoliciesGVR
	if k.cluster {
		inf, gvr = p.cluster, v1alpha1.ClusterApprovalPoliciesGVR
	}
	obj, exists, err := inf.Informer().GetIndexer().GetByKey(k.key)
	if err != nil || !exists {
		return nil
	}
	stored, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	compiled := p.compiled.Get(stored)
	want := p.condition(stored, compiled)

	var status v1alpha1.ApprovalPolicyStatus
	if raw, found, _ := unstructured.NestedMap(stored.Object, "status"); found {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status)
	}
	if have := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady); have != nil &&
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
	var ri dynamic.ResourceInterface = p.dyn.Resource(gvr)
	if ns := stored.GetNamespace(); ns != "" {
		ri = p.dyn.Resource(gvr).Namespace(ns)
	}
	_, err = ri.UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// condition is what the proxy has to say about a policy: the problems of
// its compilation, and the cost limits its current generation exceeded.
func (p *Policies) condition(stored *unstructured.Unstructured, c *policy.Compiled) metav1.Condition {
	problems := append([]policy.Problem(nil), c.Problems...)
	p.mu.Lock()
	if e, ok := p.exceeded[stored.GetUID()]; ok && e.generation == stored.GetGeneration() {
		problems = append(problems, e.problems...)
	}
	p.mu.Unlock()
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: stored.GetGeneration()}
	if len(problems) == 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonCompiled
		cond.Message = "every rule compiled"
		if c.Ref.Kind == v1alpha1.ApprovalPolicyKind {
			cond.Message += "; its rules approve writes in namespace " + c.Ref.Namespace + " only"
		}
		return cond
	}
	msgs := make([]string, len(problems))
	for i, pr := range problems {
		msgs[i] = pr.String()
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, problems[0].Reason
	cond.Message = strconv.Itoa(len(problems)) + " problem(s): " + strings.Join(msgs, "; ")
	if len(cond.Message) > 32768 {
		cond.Message = cond.Message[:32768]
	}
	return cond
}
