// Writing a /scale's allowances to the scaled object before the /scale is
// forwarded: the controller of the object acts on the /scale as soon as
// it sees it, and must find the allowances it grants already there.

package intercept

import (
	"context"
	"errors"
	"net/http"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
)

// errAheadMoved: the object moved between the decision and the write
// ahead of it; the write is decided again on fresh state.
var errAheadMoved = errors.New("the object moved before the annotations written ahead of the write")

// writeAhead writes d's AnnotationsAhead to the object under the
// resourceVersion the write was decided on, and prepares the write again
// on the version that produced: the client's own precondition moves with
// the proxy's write (nothing else can have changed in between), and one
// is added where the client named none, so that the generation the
// allowances name is the one the write produces. ok is false when the
// write cannot follow such a write (a patch naming its own
// resourceVersion, or a PUT of a version other than the stored one); d's
// annotations then follow the write as before.
func (i *Interceptor) writeAhead(r *http.Request, f *facts, d *decision.Decision) (next *facts, out forwarded, ok bool, err error) {
	decidedOn := f.old.GetResourceVersion()
	clientRV := ""
	switch {
	case f.req.w.verb == "patch":
		if _, carries, err := patch.WithResourceVersion(f.patchType, f.data, decidedOn, f.new); err != nil || !carries {
			return f, forwarded{}, false, nil
		}
	case f.sent != nil:
		clientRV = f.sent.GetResourceVersion()
	}
	if clientRV != "" && clientRV != decidedOn {
		if !f.childLive {
			// The cache may be behind the client: decide again on a live
			// read.
			return f, forwarded{}, false, errAheadMoved
		}
		// A stale copy: kube-apiserver refuses the write itself.
		return f, forwarded{}, false, nil
	}
	ctx := r.Context()
	wr := f.req.w
	annotated, err := i.sideWriter.AnnotateAt(ctx, wr.gvr, f.namespace, wr.info.Name, decidedOn, *d.AnnotationsAhead)
	switch {
	case apierrors.IsConflict(err):
		return f, forwarded{}, false, errAheadMoved
	case apierrors.IsNotFound(err):
		// Deleted meanwhile: kube-apiserver answers the write itself.
		return f, forwarded{}, false, nil
	case err != nil:
		// Allowances only ever permit: the write goes on with them
		// following it, as a write whose body carries no annotations
		// always did.
		i.cfg.Log.Warn("writing the allowances ahead of a /scale write failed; they follow it", zap.String("resource", wr.gvr.String()),
			zap.String("namespace", f.namespace), zap.String("name", wr.info.Name), zap.Error(err))
		return f, forwarded{}, false, nil
	}
	want := f.old.GetGeneration()
	if decision.AnnotationWriteBumpsGeneration(f.kind.Group, f.kind.Kind) {
		want++
	}
	if got := annotated.GetGeneration(); got != want {
		i.cfg.Log.Warn("the write ahead of a /scale gave the object a generation the allowances did not expect",
			zap.String("resource", wr.gvr.String()), zap.String("namespace", f.namespace), zap.String("name", wr.info.Name),
			zap.Int64("generation", got), zap.Int64("expected", want))
	}
	next = new(facts)
	*next = *f
	next.precondition = annotated.GetResourceVersion()
	if clientRV != "" {
		next.sent = f.sent.DeepCopy()
		next.sent.SetResourceVersion(next.precondition)
	}
	if out, err = prepare(r, next, d); err != nil {
		i.restoreAhead(f, *d.AnnotationsAhead)
		return f, forwarded{}, false, err
	}
	written := *d.AnnotationsAhead
	out.ahead = &written
	return next, out, true, nil
}

// restoreAhead puts back what was written ahead of a write that failed:
// allowances granted by a write kube-apiserver did not apply must not
// let a controller through.
func (i *Interceptor) restoreAhead(f *facts, changes decision.AnnotationChanges) {
	ctx, cancel := context.WithTimeout(context.Background(), i.cfg.SideWriteTimeout)
	defer cancel()
	wr := f.req.w
	if err := i.sideWriter.Restore(ctx, wr.gvr, f.namespace, wr.info.Name, f.old.GetUID(), changes, f.old.GetAnnotations()); err != nil {
		i.cfg.Log.Warn("taking back the allowances written ahead of a failed /scale write failed", zap.String("resource", wr.gvr.String()),
			zap.String("namespace", f.namespace), zap.String("name", wr.info.Name), zap.Error(err))
	}
}
