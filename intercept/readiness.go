package intercept

import (
	"context"
	"errors"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
)

// unservedKinds remembers which policy kinds kube-apiserver answered with
// 404 (their CRDs are not installed). An informer of a kind that is not
// served never syncs, and there are no policies of it to wait for.
type unservedKinds struct {
	namespaced, cluster atomic.Bool
}

// trackUnserved watches the informers' list and watch errors for 404s.
// It must run before the informers start.
func (p *Policies) trackUnserved() {
	for _, inf := range []struct {
		informer cache.SharedIndexInformer
		flag     *atomic.Bool
	}{{p.namespaced.Informer(), &p.unserved.namespaced}, {p.cluster.Informer(), &p.unserved.cluster}} {
		flag := inf.flag
		_ = inf.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			flag.Store(apierrors.IsNotFound(err))
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
	}
}

// HasSynced reports whether both policy caches hold what kube-apiserver
// has (or kube-apiserver serves no such kind). Until then For returns no
// policies: a write a policy would approve is decided as unapproved drift.
func (p *Policies) HasSynced() bool {
	return (p.namespaced.Informer().HasSynced() || p.unserved.namespaced.Load()) &&
		(p.cluster.Informer().HasSynced() || p.unserved.cluster.Load())
}

// errPoliciesNotSynced is what readiness reports while the approval
// policies are still being listed.
var errPoliciesNotSynced = errors.New("the approval-policy caches have not synced")

// errAllowancePoliciesNotSynced is what readiness reports while the
// allowance policies are still being listed: a controller's write checked
// before would be a violation a policy allows.
var errAllowancePoliciesNotSynced = errors.New("the allowance-policy cache has not synced")

// errSettlementsNotSynced is what readiness reports while the records of
// the parents' settledness are still being read: a replica that decided
// before would be lenient about parents the cluster records as settled.
var errSettlementsNotSynced = errors.New("the records of the parents' settledness have not been read yet")

// Ready reports why the write path cannot decide as it would with complete
// information yet, or nil when it can. The caches it waits for are those
// every decision may consult: the approval and allowance policies and the
// records of settledness. The object caches
// start lazily and fall back to live reads, so they never hold a decision
// back.
func (i *Interceptor) Ready() error {
	if i == nil {
		return nil
	}
	if s, ok := i.cfg.Policies.(interface{ HasSynced() bool }); ok && !s.HasSynced() {
		return errPoliciesNotSynced
	}
	if i.cfg.AllowancePolicies != nil && !i.cfg.AllowancePolicies.HasSynced() {
		return errAllowancePoliciesNotSynced
	}
	if i.cfg.Settlements != nil && !i.cfg.Settlements.HasSynced() {
		return errSettlementsNotSynced
	}
	return nil
}
