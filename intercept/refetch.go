// Fetching what a decision still needs (decision.Needs) into a new facts
// value: a live read of the object, kube-apiserver's own result for the
// write, a live read of the parent, and whether the caller may read them.
// The reads are independent, so they run together.

package intercept

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// maxConfirmAnswer bounds what is kept of a confirming dry run's answer:
// the object kube-apiserver would store.
const maxConfirmAnswer = 16 << 20

// serverResult is kube-apiserver's own view of the write: the object as
// stored (nil: deleted meanwhile) and the object the write would store.
type serverResult struct {
	live, stored *unstructured.Unstructured
}

// refetch returns f with need fetched. r is the client's request, which a
// dry run repeats through up.
func (i *Interceptor) refetch(r *http.Request, f facts, need decision.Need, up upstream) (facts, error) {
	got, err := i.fetch(r, &f, need, up)
	if err != nil {
		return f, err
	}
	if need.FreshParent && f.parent.obj != nil {
		f.parent = got.parent
	}
	switch {
	case need.ServerResult:
		f.confirmed = true
		if got.server.live != nil {
			f.old, f.new, f.childLive, f.oldIsMetadata = got.server.live, got.server.stored, true, false
			f.precondition = got.server.live.GetResourceVersion()
			f.changed, f.changes = desiredChange(f.op, f.old, f.new)
		}
	case need.LiveChild && got.live != nil:
		if f, err = i.withLiveChild(r.Context(), f, got.live); err != nil {
			return f, err
		}
	}
	ctx := r.Context()
	if need.ChildAccess {
		f.childAccessKnown = true
		f.mayReadChild = f.kind.GroupKind() != (schema.GroupKind{Kind: "Secret"}) && i.mayRead(ctx, f.req.user, f.req.w)
	}
	if need.ParentAccess {
		f.parentAccessKnown = true
		if f.parent.obj != nil {
			f.parent.hidden = !i.mayReadParent(ctx, f.req.user, f.parent.obj)
		}
		if f.formerParent.obj != nil {
			f.formerParent.hidden = !i.mayReadParent(ctx, f.req.user, f.formerParent.obj)
		}
	}
	return f, nil
}

// fetched is what one round of reads brought.
type fetched struct {
	live   *unstructured.Unstructured
	server serverResult
	parent parentFacts
}

// fetch makes the independent reads need asks for, together.
func (i *Interceptor) fetch(r *http.Request, f *facts, need decision.Need, up upstream) (fetched, error) {
	var (
		got                        fetched
		wg                         sync.WaitGroup
		liveErr, serverErr, parErr error
	)
	if need.LiveChild {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got.live, liveErr = i.liveChild(r.Context(), f)
		}()
	}
	if need.ServerResult {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got.server, serverErr = i.serverResultOf(r, f, up)
		}()
	}
	if need.FreshParent && f.parent.obj != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got.parent, parErr = i.freshParent(r.Context(), f)
		}()
	}
	wg.Wait()
	return got, errors.Join(serverErr, liveErr, parErr)
}

// withLiveChild returns f with the stored object read live, and what the
// write makes of it: a PUT's object is the client's whatever is stored; a
// patch and a /scale write apply to it.
func (i *Interceptor) withLiveChild(ctx context.Context, f facts, live *unstructured.Unstructured) (facts, error) {
	f.old, f.childLive, f.oldIsMetadata = live, true, false
	var err error
	switch {
	case f.req.w.sub == scaleSubresource:
		f.new, err = i.scaledObject(ctx, &f)
	case f.req.w.verb == "patch":
		f.new, err = patched(&f)
	}
	if err != nil {
		return f, err
	}
	if f.req.w.sub != statusSubresource {
		f.changed, f.changes = desiredChange(f.op, f.old, f.new)
	}
	return f, nil
}

// afresh returns f as a new round starts it after the state moved: the
// object and its parent are read live again, and nothing the last round
// confirmed counts.
func (i *Interceptor) afresh(r *http.Request, f facts, up upstream) (facts, error) {
	f.confirmed, f.precondition, f.childLive = false, "", false
	if f.op == decision.Create {
		return i.refetch(r, f, decision.Need{FreshParent: true}, up)
	}
	return i.refetch(r, f, decision.Need{LiveChild: true, FreshParent: true}, up)
}

// liveChild reads the stored object live; nil when it is gone (then
// kube-apiserver answers the write itself).
func (i *Interceptor) liveChild(ctx context.Context, f *facts) (*unstructured.Unstructured, error) {
	wr := f.req.w
	live, err := i.cfg.Objects.GetLive(ctx, wr.gvr, f.namespace, wr.info.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", f.kind.Kind, qualifiedName(f.namespace, wr.info.Name), err))
	}
	return live, nil
}

// serverResultOf reads the stored object live and asks kube-apiserver, in
// a dry run as the caller, what the same request would store. The
// answer is read here, whatever the caller accepts.
func (i *Interceptor) serverResultOf(r *http.Request, f *facts, up upstream) (serverResult, error) {
	var (
		wg      sync.WaitGroup
		live    *unstructured.Unstructured
		liveErr error
	)
	if f.childLive {
		// Read live already, for this round: the precondition is that
		// read's resourceVersion.
		live = f.old
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			live, liveErr = i.liveChild(r.Context(), f)
		}()
	}
	dry := r.Clone(r.Context())
	dry.Header.Set("Accept", "application/json")
	answer, err := up.dryRun(dry, f.data, maxConfirmAnswer)
	wg.Wait()
	if err != nil {
		return serverResult{}, err
	}
	if liveErr != nil {
		return serverResult{}, liveErr
	}
	if live == nil {
		// Deleted meanwhile: kube-apiserver answers the write itself.
		return serverResult{}, nil
	}
	if !answer.succeeded() {
		return serverResult{}, &refusedByServer{answer}
	}
	if answer.truncated {
		return serverResult{}, i.unresolvable(fmt.Errorf("kube-apiserver's dry run of this write answered more than %d bytes", maxConfirmAnswer))
	}
	stored := &unstructured.Unstructured{}
	if err := stored.UnmarshalJSON(answer.body.Bytes()); err != nil {
		return serverResult{}, i.unresolvable(fmt.Errorf("reading kube-apiserver's dry run of this write: %w", err))
	}
	if f.req.w.sub == scaleSubresource {
		// The answer is the Scale kube-apiserver would store: the object
		// it scales is the live one with those replicas.
		path, err := i.specReplicasPath(r.Context(), f.req.w.gvr)
		if err != nil {
			return serverResult{}, err
		}
		if stored, err = desired.ScaleToPath(stored, live, path); err != nil {
			return serverResult{}, apierrors.NewInternalError(err)
		}
	}
	return serverResult{live: live, stored: stored}, nil
}

// freshParent reads f's parent live.
func (i *Interceptor) freshParent(ctx context.Context, f *facts) (parentFacts, error) {
	p := f.parent.obj
	m, err := i.cfg.Objects.Mapping(p.GroupVersionKind())
	if err != nil {
		return parentFacts{}, i.unresolvable(err)
	}
	ns := p.GetNamespace()
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		ns = ""
	}
	fresh, err := i.cfg.Objects.GetLive(ctx, m.Resource, ns, p.GetName())
	if apierrors.IsNotFound(err) {
		ref := metav1.OwnerReference{APIVersion: p.GetAPIVersion(), Kind: p.GetKind(), Name: p.GetName(), UID: p.GetUID()}
		return parentFacts{obj: goneParent(&ref, f.namespace), source: "gone", hidden: f.parent.hidden}, nil
	}
	if err != nil {
		return parentFacts{}, i.unresolvable(fmt.Errorf("re-reading the parent: %w", err))
	}
	pf := i.parentFactsOf(ctx, f, fresh, "live")
	pf.hidden = f.parent.hidden
	return pf, nil
}
