// Acting on a decision: refusing with a Status, the request to forward
// (annotations written into the body, the precondition the decision rests
// on), the port that forwards it, and what follows success: the parent
// writes, DriftReports, and what the proxy learns from a status write.

package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/intercept/sidewrites"
	"github.com/kausality-io/kausality-proxy/intercept/storedcopies"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
	"github.com/kausality-io/kausality-proxy/internal/httpx"
	"github.com/kausality-io/kausality-proxy/report"
)

// learnStatus tells the settledness memory about a status write that
// kube-apiserver accepted, before the cache sees it: the status is the
// write's, the spec is the stored one (a status write never changes it,
// whatever spec its body carries).
func (i *Interceptor) learnStatus(f *facts) {
	if f.old == nil || f.new == nil {
		return
	}
	status, ok := f.new.Object["status"]
	if !ok {
		return
	}
	obj := &unstructured.Unstructured{Object: make(map[string]interface{}, len(f.old.Object))}
	for k, v := range f.old.Object {
		obj.Object[k] = v
	}
	obj.Object["status"] = status
	// This content is not the stored version's: under its resourceVersion
	// the memory would take what it saw of that version, status and all,
	// and learn nothing from the write. Without one the memory reads it
	// afresh and keeps it under no version. f.old's metadata is shared:
	// copied, not changed.
	if meta, ok := f.old.Object["metadata"].(map[string]interface{}); ok {
		m := make(map[string]interface{}, len(meta))
		for k, v := range meta {
			if k != "resourceVersion" {
				m[k] = v
			}
		}
		obj.Object["metadata"] = m
	}
	i.settled.Observe(obj)
}

// report sends the DriftReport the decision calls for, once the outcome is
// known: after a denial, or after the upstream accepted the write (a
// reserved once approval is only really used then).
func (i *Interceptor) report(f *facts, d *decision.Decision) {
	if i.cfg.Drifts == nil {
		return
	}
	i.cfg.Drifts.Observe(d, report.Write{Operation: f.op, OldObject: f.old, NewObject: f.new,
		Changes: f.changes, User: f.req.user, FieldManager: f.req.w.fieldManager, DryRun: f.dryRun}, reportedParent(f, d))
}

// reportedParent is the parent object the decision's drift is under: the
// one the write moves the child away from when the decision names it
// (leaving a settled parent is drift there), else the one it ends up with.
// The record keeps its spec hash, which tells when the drift is over.
func reportedParent(f *facts, d *decision.Decision) *unstructured.Unstructured {
	if p := f.formerParent.obj; p != nil && d.Parent != nil && d.Parent.Ref == decision.RefOf(p) && d.Parent.UID == string(p.GetUID()) {
		return p
	}
	return f.parent.obj
}

// deny refuses the write with the decision's Status.
func (i *Interceptor) deny(w http.ResponseWriter, f *facts, d *decision.Decision, writeError ErrorWriter) {
	for _, warning := range d.Warnings {
		w.Header().Add("Warning", formatWarning(warning))
	}
	err := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: d.Message,
		Details: &metav1.StatusDetails{
			Name:   d.Child.Name,
			Group:  f.req.w.gvr.Group,
			Kind:   f.req.w.gvr.Resource,
			Causes: d.Causes,
		},
	}}
	i.recordDecision(f, d, "denied")
	writeError(w, err)
	if !f.dryRun {
		i.report(f, d)
	}
}

// forwarded is the request to forward for a decided write.
type forwarded struct {
	req *http.Request
	// preconditionAdded: the proxy added the resourceVersion the decision
	// rests on (precondition), which the client did not send.
	preconditionAdded bool
	precondition      string
	// uid: the uid precondition the proxy added to a delete ("" for
	// none); a failure of it is the proxy's own, as preconditionAdded.
	uid types.UID
	// ahead: what was written to the object ahead of it (nil: nothing).
	ahead *decision.AnnotationChanges
}

// prepare returns the request to forward: unchanged, or with the child
// annotation changes the decision asks for written into its body, and as
// its precondition the resourceVersion the decision was confirmed on, or
// the one of the stored object the annotations it puts back come from.
func prepare(r *http.Request, f *facts, d *decision.Decision) (forwarded, error) {
	wr := f.req.w
	if f.op == decision.Delete {
		return pinnedDelete(r, f)
	}
	// A status write carries annotations too: kube-apiserver keeps them
	// for most built-in kinds.
	annotate := !d.ChildAnnotations.Empty() && f.new != nil && (wr.sub == mainResource || wr.sub == statusSubresource)
	version := f.precondition
	if version == "" && d.OnStoredVersion && f.old != nil && !f.dryRun {
		version = f.old.GetResourceVersion()
	}
	// A status write lands on its version only for the annotations put
	// back: its other facts are never confirmed.
	pinnable := wr.sub == mainResource || wr.sub == scaleSubresource || wr.sub == statusSubresource && d.OnStoredVersion
	precondition := version != "" && pinnable && f.op == decision.Update
	if !annotate && !precondition {
		return forwarded{req: r}, nil
	}
	contentType := r.Header.Get("Content-Type")
	var (
		data  []byte
		added bool
		err   error
	)
	if !precondition {
		version = ""
	}
	if wr.verb == "patch" {
		data, added, err = preparedPatch(f, d, annotate, version)
	} else {
		data, contentType, added, err = preparedObject(f, d, annotate, version)
	}
	if err != nil {
		return forwarded{}, err
	}
	out := r.Clone(r.Context())
	upstream.RestoreBody(out, data)
	out.Header.Set("Content-Type", contentType)
	return forwarded{req: out, preconditionAdded: added, precondition: version}, nil
}

// pinnedDelete is the DELETE to forward: r, made to delete only the object
// it was decided on. kube-apiserver deletes by name, so without the pin a
// DELETE decided on an object that was since deleted and created again
// under its name (a StatefulSet's pod, a terminating child an operator
// deletes until it is gone) removes the new object undecided. The object's
// uid becomes the delete's precondition, unless the caller named one of
// its own, which pins it already. kube-apiserver reads a DELETE's options
// from its body when it has one, else from its query: options of the query
// move into the body with the pin. A failed pin is the proxy's own
// conflict, and the DELETE is decided again on the object read live.
func pinnedDelete(r *http.Request, f *facts) (forwarded, error) {
	if f.req.w.sub != mainResource || f.dryRun || f.old == nil || f.old.GetUID() == "" {
		return forwarded{req: r}, nil
	}
	opts := f.deleteOptions
	if opts == nil {
		var err error
		if opts, err = upstream.DeleteOptionsOf(r, f.data); err != nil {
			return forwarded{}, err
		}
	}
	if p := opts.Preconditions; p != nil && (p.UID != nil || p.ResourceVersion != nil) {
		return forwarded{req: r}, nil
	}
	if ptr.Deref(opts.IgnoreStoreReadErrorWithClusterBreakingPotential, false) {
		// kube-apiserver refuses an unsafe delete that carries
		// preconditions (ValidateIgnoreStoreReadError): pinned, the
		// caller's delete of a corrupt object would be a 422.
		return forwarded{req: r}, nil
	}
	pinned := opts.DeepCopy()
	uid := f.old.GetUID()
	pinned.Preconditions = &metav1.Preconditions{UID: &uid}
	pinned.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "DeleteOptions"}
	data, contentType, err := encodedDeleteOptions(pinned, r.Header.Get("Content-Type"), len(f.data) > 0)
	if err != nil {
		return forwarded{}, err
	}
	out := r.Clone(r.Context())
	out.Header.Set("Content-Type", contentType)
	upstream.RestoreBody(out, data)
	return forwarded{req: out, preconditionAdded: true, precondition: "uid " + string(uid), uid: uid}, nil
}

// encodedDeleteOptions is opts as the body of a DELETE whose own body, if
// it had one, was of contentType: in JSON, except where a body was CBOR.
// kube-apiserver reads CBOR options only with CBOR serving on; in JSON they
// would be read where the caller's are refused (415).
func encodedDeleteOptions(opts *metav1.DeleteOptions, contentType string, hadBody bool) ([]byte, string, error) {
	if format, _ := body.FormatFor(contentType); !hadBody || format != body.CBOR {
		data, err := json.Marshal(opts)
		if err != nil {
			return nil, "", apierrors.NewInternalError(err)
		}
		return data, "application/json", nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(opts)
	if err != nil {
		return nil, "", apierrors.NewInternalError(err)
	}
	return body.Encode(&unstructured.Unstructured{Object: m}, body.CBOR)
}

// preparedPatch is the patch to forward: with the child annotation
// changes, and the precondition (version, unless "") when the client's
// patch names none.
func preparedPatch(f *facts, d *decision.Decision, annotate bool, version string) (data []byte, added bool, err error) {
	data = f.data
	if annotate {
		data, err = patch.AddAnnotations(f.patchType, data, d.ChildAnnotations.Pointers(), f.new)
		if errors.Is(err, patch.ErrNotRewritable) {
			// Forwarding it would remove every kausality.io annotation,
			// the object's own mode and the trace included.
			return nil, false, apierrors.NewInvalid(f.kind.GroupKind(), f.req.w.info.Name, field.ErrorList{field.Forbidden(
				field.NewPath("metadata", "annotations"),
				"kausality-proxy: this patch replaces metadata.annotations as a whole, which would drop the kausality.io annotations the proxy keeps on this object; patch individual annotation keys instead")})
		}
		if err != nil {
			return nil, false, err
		}
	}
	if version == "" {
		return data, false, nil
	}
	return patch.WithResourceVersion(f.patchType, data, version, f.new)
}

// preparedObject is the object to forward: the client's object, never the
// dry run's answer, plus the proxy's own changes and the precondition
// (version, unless "") when the client's object names none.
func preparedObject(f *facts, d *decision.Decision, annotate bool, version string) (data []byte, contentType string, added bool, err error) {
	precondition := version != ""
	if f.format == body.JSON && f.sent == f.decoded {
		var meta patch.ObjectMetadata
		if annotate {
			meta.Annotations = d.ChildAnnotations.Pointers()
		}
		if precondition {
			meta.ResourceVersion = version
		}
		if f.req.w.sub != scaleSubresource {
			// Decoding filled in the request's namespace (facts.go).
			meta.Namespace = f.namespace
		}
		if data, added, ok := patch.AnnotateObject(f.data, meta); ok {
			return data, body.ContentTypeJSON, added, nil
		}
	}
	if f.format == body.Protobuf && f.sent == f.decoded {
		added = precondition && !patch.NamesVersion(f.sent.GetResourceVersion())
		data, err = body.WithProtobufMetadata(f.data, f.decodedAs(), func(m metav1.Object) {
			if annotate {
				d.ChildAnnotations.ApplyTo(m)
			}
			if added {
				m.SetResourceVersion(version)
			}
			if f.req.w.sub != scaleSubresource {
				m.SetNamespace(f.namespace)
			}
		})
		return data, body.ContentTypeProtobuf, added, err
	}
	obj := f.sent.DeepCopy()
	if annotate {
		d.ChildAnnotations.Apply(obj)
	}
	if precondition && !patch.NamesVersion(obj.GetResourceVersion()) {
		obj.SetResourceVersion(version)
		added = true
	}
	data, contentType, err = body.Encode(obj, f.format)
	return data, contentType, added, err
}

// afterSuccess is what follows a write kube-apiserver applied: what a
// status write teaches, the parent writes, the trace of a /scale write,
// and the DriftReport.
func (i *Interceptor) afterSuccess(f *facts, d *decision.Decision) {
	if f.req.w.sub == statusSubresource {
		i.learnStatus(f)
	}
	i.sideWrites(d.ParentWrites)
	if f.req.w.sub == scaleSubresource {
		i.traceScaled(f, d)
	}
	i.report(f, d)
}

// sideWrites records controller identity and the lifecycle phase on
// parents after the triggering write succeeded. They run in the
// background: the caller's write is done and must not wait or fail on them.
func (i *Interceptor) sideWrites(writes []decision.SideWrite) {
	for _, sw := range writes {
		if sw.AnnotationChanges.Empty() {
			continue
		}
		if sw.Deferred {
			i.deferred.Schedule(sw)
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), i.cfg.SideWriteTimeout)
			defer cancel()
			if err := i.sideWriter.Apply(ctx, sw); err != nil {
				i.cfg.Log.Warn("side write failed", zap.String("target", sw.Target.String()),
					zap.Strings("reasons", sw.Reasons), zap.Error(err))
			}
		}()
	}
}

// formatWarning renders an RFC 7234 warning as kube-apiserver does.
func formatWarning(text string) string {
	text = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, text)
	// kubectl unquotes the text before it prints it: escape sequences
	// taken from annotations or names must arrive escaped.
	return `299 - ` + strconv.Quote(annotations.Printable(text))
}

// moved says what moved while a decided write was acted on, so that it is
// decided again.
type moved int

const (
	// nothingMoved: the client has its answer.
	nothingMoved moved = iota
	// parentMoved: the once approval could not be taken off the parent,
	// which changed since it was read.
	parentMoved
	// objectMoved: the proxy's precondition failed on the forwarded
	// write; the client has heard nothing yet.
	objectMoved
)

// act carries out the steps of decision d on f's write (decision.StepsFor):
// refuse it, or prepare it, preflight it, reserve its once approval and
// forward it, and record what came of it. preflighted is kept across the
// rounds of one write.
func (i *Interceptor) act(x exchange, f *facts, d *decision.Decision, round int, preflighted *bool) (moved, error) {
	var (
		out      forwarded
		reserved *sidewrites.Write
		err      error
	)
	for _, step := range decision.StepsFor(d, f.dryRun, *preflighted) {
		switch step {
		case decision.StepRefuse:
			i.deny(x.w, f, d, x.writeError)
			return nothingMoved, nil
		case decision.StepPrepare:
			if out, err = prepare(x.r, f, d); err != nil {
				return nothingMoved, err
			}
		case decision.StepPreflight:
			answer, ok := i.dryRunOf(x, out.req)
			if ok && out.preconditionAdded && answer.PreconditionFailed(out.uid) {
				// The pin the proxy added failed: the object changed,
				// or was deleted and created again, since the decision.
				if decision.OnForwardedConflict(true, round) == decision.RefuseStillMoving {
					return nothingMoved, stillMoving(f.req.w, "the object")
				}
				return objectMoved, nil
			}
			if !ok || !i.preflightAccepted(x, answer) {
				i.recordDecision(f, d, "dry-run-refused")
				return nothingMoved, nil
			}
			*preflighted = true
		case decision.StepReserve:
			rw, err := i.reserve(x.r.Context(), f, d.ApprovalsUpdate)
			if err != nil {
				if err := i.reservationFailed(f, d, err, round); err != nil {
					return nothingMoved, err
				}
				return parentMoved, nil
			}
			reserved = &rw
		case decision.StepWriteAhead:
			next, prepared, ok, err := i.writeAhead(x.r, f, d)
			switch {
			case errors.Is(err, errAheadMoved):
				if reserved != nil {
					i.approvals.Settle(*reserved, decision.OnWriteAnswer(http.StatusConflict))
				}
				if decision.OnForwardedConflict(true, round) == decision.RefuseStillMoving {
					return nothingMoved, stillMoving(f.req.w, "the object")
				}
				return objectMoved, nil
			case err != nil:
				if reserved != nil {
					i.approvals.Settle(*reserved, decision.OnWriteAnswer(0))
				}
				return nothingMoved, err
			case ok:
				f, out = next, prepared
			default:
				*d = d.AheadFollowing()
			}
		case decision.StepForward:
			if reserved != nil {
				out.req = i.boundedAtUpstream(out.req)
			}
			again, err := i.forward(x, f, d, out, reserved, round)
			if err != nil || !again {
				return nothingMoved, err
			}
		}
	}
	return objectMoved, nil
}

// preflight sends out as a server-side dry run and reports whether
// kube-apiserver would accept it. When it would not, its answer has been
// written to the client and nothing was changed anywhere.
func (i *Interceptor) preflight(x exchange, out *http.Request) bool {
	answer, ok := i.dryRunOf(x, out)
	return ok && i.preflightAccepted(x, answer)
}

// dryRunOf sends out as a server-side dry run and returns kube-apiserver's
// answer; false when it could not be sent, which has been answered to the
// client then.
func (i *Interceptor) dryRunOf(x exchange, out *http.Request) (*upstream.Answer, bool) {
	data, err := readAll(out)
	if err != nil {
		x.writeError(x.w, err)
		return nil, false
	}
	answer, err := x.up.DryRun(out, data, maxPreflightAnswer)
	if err != nil {
		x.writeError(x.w, err)
		return nil, false
	}
	return answer, true
}

// preflightAccepted reports whether answer, a preflight's, accepts the
// write; a refusal has been relayed to the client.
func (i *Interceptor) preflightAccepted(x exchange, answer *upstream.Answer) bool {
	if answer.Succeeded() {
		return true
	}
	answer.Replay(x.w, x.writeError)
	return false
}

// reservationFailed is the error to answer after reserving a once
// approval failed, or nil when the parent moved and the write is to be
// decided again on a fresh read of it.
func (i *Interceptor) reservationFailed(f *facts, d *decision.Decision, err error, round int) error {
	switch decision.OnReservationError(reservationError(err), round, decision.MaxRounds) {
	case decision.RefuseRetryable:
		return stillMoving(f.req.w, "the parent "+d.ApprovalsUpdate.Target.String())
	case decision.RefuseAsFailure:
		return i.unresolvable(fmt.Errorf("reserving the once approval on %s: %w", d.ApprovalsUpdate.Target, err))
	}
	return nil
}

// forward sends the decided write and acts on the answer. It reports true
// when the proxy's own precondition failed and the write is to be decided
// again; the client has heard nothing then.
func (i *Interceptor) forward(x exchange, f *facts, d *decision.Decision, out forwarded, reserved *sidewrites.Write, round int) (bool, error) {
	rec := httpx.NewCodeRecorder(x.w)
	keep := keepsAnswer(f)
	if keep {
		rec.KeepBody = storedcopies.DefaultLimits.ObjectBytes
	}
	if reserved != nil {
		// Settled before the client hears the answer: a client that
		// retries at once finds the approval back when it is put back.
		rec.BeforeHeader = func(code int) { i.approvals.Settle(*reserved, decision.OnWriteAnswer(code)) }
	}
	answer := upstream.NewConflictCatcher(rec, out.preconditionAdded && !f.dryRun)
	if out.uid != "" {
		answer = upstream.NewUIDConflictCatcher(rec, out.uid)
	}
	for _, warning := range d.Warnings {
		answer.Header().Add("Warning", formatWarning(warning))
	}
	if f.dryRun {
		answer.Header().Add("Warning", formatWarning(fmt.Sprintf("kausality dry-run: %s (%s): %s", d.Result, d.Category, d.Reason)))
	}
	x.up.Send(answer, out.req)
	held := answer.Done()
	if out.ahead != nil && (held || rec.Code() < 200 || rec.Code() >= 300) {
		i.restoreAhead(f, *out.ahead)
	}
	if held {
		if reserved != nil {
			i.approvals.Settle(*reserved, decision.OnWriteAnswer(http.StatusConflict))
		}
		switch decision.OnForwardedConflict(out.preconditionAdded, round) {
		case decision.RefuseStillMoving:
			return false, stillMoving(f.req.w, "the object")
		default:
			// One decision line per write: the round is only traced.
			i.cfg.Log.Info("the object moved between the decision and the write; deciding again",
				zap.String("resource", f.req.w.gvr.String()), zap.String("namespace", f.namespace),
				zap.String("name", f.req.w.info.Name), zap.Int("round", round), zap.String("precondition", out.precondition))
			return true, nil
		}
	}
	if reserved != nil && rec.Code() == 0 {
		// No answer was written at all: it does not say either.
		i.approvals.Settle(*reserved, decision.OnWriteAnswer(0))
	}
	if rec.Code() >= 200 && rec.Code() < 300 && !f.dryRun {
		if body, whole := rec.Body(); keep && whole {
			i.copies.Put(storedcopies.Key{Resource: f.req.w.gvr, Kind: f.kind, Namespace: f.namespace, Name: f.req.w.info.Name}, body, rec.Header().Get("Content-Type"))
		}
		i.afterSuccess(f, d)
	}
	i.recordDecision(f, d, "forwarded:"+strconv.Itoa(rec.Code()))
	return false, nil
}

// keepsAnswer says whether kube-apiserver's answer to f's write is kept as
// the stored child: when the write was decided on the whole child, which
// the caches do not hold, the next write of it likely is too.
func keepsAnswer(f *facts) bool {
	return (f.childLive || f.oldIsCopy) && !f.dryRun && f.req.w.sub == mainResource && f.op != decision.Delete &&
		storedcopies.Kept(f.req.w.gvr)
}

// collectionActs is what acting on a deletecollection keeps across its
// rounds: a round ends when the parent of an object moved under the
// reservation of its once approval, and that object is decided again.
type collectionActs struct {
	// out is the request to forward, pinned to the decided list.
	out *http.Request
	// reserved are the once approvals taken so far; next is the object
	// whose steps come next, and round the round it is in.
	reserved    []sidewrites.Write
	next, round int
	preflighted bool
	// redecided is the error of deciding that object again.
	redecided error
}

// actOnCollection carries out the combined verdict of a deletecollection:
// refuse it whole, or reserve the once approvals its objects use, forward
// it pinned to the decided list, and record what came of each object. It
// returns the index of an object whose parent moved under its
// reservation, to be decided again before acting goes on from it, or -1
// when the client has its answer.
func (i *Interceptor) actOnCollection(x exchange, f facts, c *collection, acts *collectionActs) int {
	if verdict := c.combined.Verdict; verdict.Refused {
		i.refuseCollection(x, &f, c, verdict)
		return -1
	}
	// An object decided again that could not be is answered as a failure
	// to prepare or reserve is: what was reserved is put back.
	err := acts.redecided
	if err == nil && acts.out == nil {
		acts.out, err = pinnedCollection(x.r, c, f.data)
	}
	moved := -1
	if err == nil {
		moved, err = i.reserveCollection(x, c, acts)
	}
	if err != nil {
		for _, rw := range acts.reserved {
			i.approvals.GiveBack(rw, "the deletecollection was not forwarded")
		}
		var refusal *collectionRefused
		switch {
		case errors.As(err, &refusal):
			i.refuseCollection(x, &f, c, refusal.verdict)
		case errors.Is(err, errPreflightRefused):
			for k := range c.members {
				i.recordDecision(&c.members[k].f, &c.members[k].d, "dry-run-refused")
			}
		default:
			i.fail(x, &f, err)
		}
		return -1
	}
	if moved >= 0 {
		return moved
	}
	out := acts.out
	if len(acts.reserved) > 0 {
		out = i.boundedAtUpstream(out)
	}
	i.forwardCollection(x, c, out, acts.reserved)
	return -1
}

// boundedAtUpstream returns out with a timeout for kube-apiserver that
// ends no later than the proxy's own deadline for the request. A write
// kube-apiserver answers 504, or whose answer is lost, may go on being
// processed until its deadline there; the once approval reserved for it
// is put back only after that (package sidewrites), which is sound only
// if that deadline is the proxy's, not whatever kube-apiserver's
// --request-timeout is.
func (i *Interceptor) boundedAtUpstream(out *http.Request) *http.Request {
	left := i.cfg.RequestTimeout
	if deadline, ok := out.Context().Deadline(); ok {
		left = min(left, time.Until(deadline))
	}
	// Whole seconds, rounded down: kube-apiserver's deadline starts when
	// the request reaches it, after the proxy's.
	seconds := max(1, int64(left/time.Second))
	q := out.URL.Query()
	if given, err := time.ParseDuration(q.Get("timeout")); err == nil && given > 0 && given <= time.Duration(seconds)*time.Second {
		return out
	}
	bounded := out.Clone(out.Context())
	q.Set("timeout", strconv.FormatInt(seconds, 10)+"s")
	bounded.URL.RawQuery = q.Encode()
	bounded.RequestURI = ""
	return bounded
}

// pinnedCollection is the deletecollection to forward: r, pinned to the
// list the decisions were made on. Without the pin, an object created
// between the list and the delete would be deleted undecided.
// kube-apiserver reads a body-less deletecollection's options from its
// query, resourceVersion included, and makes that resourceVersion every
// delete's precondition. So a body-less request that names none gets the
// pin with its options moved into a body, where the pin only selects what
// is deleted (as a precondition it would be a 409 for each object changed
// since it was created). One that names a resourceVersion keeps it: that
// precondition already fails for any object created or changed after the
// list. A request with a body that names a resourceVersion to be matched
// not older than (or any, "0") is pinned to the list, which the proxy made
// with the same options, so it is at least as new as the caller asked.
func pinnedCollection(r *http.Request, c *collection, data []byte) (*http.Request, error) {
	if !c.pin || c.snapshot == "" || c.callerVersion && len(data) == 0 {
		return r, nil
	}
	out := r.Clone(r.Context())
	if len(data) == 0 {
		opts, err := upstream.DeleteOptionsOf(r, nil)
		if err != nil {
			return nil, err
		}
		opts.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "DeleteOptions"}
		if data, err = json.Marshal(opts); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		out.Header.Set("Content-Type", "application/json")
	}
	q := out.URL.Query()
	q.Set("resourceVersion", c.snapshot)
	q.Set("resourceVersionMatch", string(metav1.ResourceVersionMatchExact))
	out.URL.RawQuery = q.Encode()
	out.RequestURI = ""
	upstream.RestoreBody(out, data)
	return out, nil
}

// forwardCollection forwards the decided deletecollection and acts on the
// answer for each of its objects.
func (i *Interceptor) forwardCollection(x exchange, c *collection, out *http.Request, reserved []sidewrites.Write) {
	for _, warning := range c.combined.Warnings() {
		x.w.Header().Add("Warning", formatWarning(warning))
	}
	// As for one write, each reserved approval is settled by the answer;
	// an answer other than success is settled by what is still stored,
	// since kube-apiserver may have deleted some of the objects before it
	// failed.
	settle := func(code int) {
		for _, rw := range reserved {
			i.approvals.Settle(rw, decision.OnCollectionAnswer(code))
		}
	}
	rec := httpx.NewCodeRecorder(x.w)
	rec.BeforeHeader = settle
	x.up.Send(rec, out)
	code := rec.Code()
	if code == 0 {
		settle(0)
	}
	succeeded := code >= 200 && code < 300
	var parentWrites []decision.SideWrite
	for k := range c.members {
		m := &c.members[k]
		if succeeded && !c.dryRun {
			parentWrites = append(parentWrites, m.d.ParentWrites...)
			i.report(&m.f, &m.d)
		}
		i.recordDecision(&m.f, &m.d, "forwarded:"+strconv.Itoa(code))
	}
	i.sideWrites(decision.DistinctSideWrites(parentWrites))
}

// errPreflightRefused: kube-apiserver refused the dry run of a
// deletecollection, and its answer was relayed.
var errPreflightRefused = errors.New("the dry run of the deletecollection was refused")

// collectionRefused: an object of the deletecollection may not be
// deleted after all (decided again after a reservation conflict).
type collectionRefused struct{ verdict decision.CollectionVerdict }

func (e *collectionRefused) Error() string {
	return "an object of the deletecollection may not be deleted"
}

// reserveCollection takes off their parents the once approvals the
// decisions consume, after a dry run of the whole request as the caller
// has shown that kube-apiserver accepts it (as for one write), going on
// from the object acts.next. It returns the index of an object whose
// parent moved under its reservation, to be decided again from a fresh
// read of its parent (-1: none). On an error, acts holds what it
// reserved, for the caller to put back.
func (i *Interceptor) reserveCollection(x exchange, c *collection, acts *collectionActs) (int, error) {
	for ; acts.next < len(c.members); acts.next, acts.round = acts.next+1, 0 {
		k := acts.next
		m := &c.members[k]
		acts.round++
		// The steps of each object's own DELETE, but the one request is
		// prepared and forwarded once, for all of them.
		for _, step := range decision.StepsFor(&m.d, c.dryRun, acts.preflighted) {
			switch step {
			case decision.StepRefuse:
				return -1, &collectionRefused{verdict: decision.CollectionVerdict{Refused: true, Denied: 1, Blocked: []int{k}}}
			case decision.StepPreflight:
				if !i.preflight(x, acts.out) {
					return -1, errPreflightRefused
				}
				acts.preflighted = true
			case decision.StepReserve:
				rw, err := i.reserve(x.r.Context(), &m.f, m.d.ApprovalsUpdate)
				if err != nil {
					if err := i.reservationFailed(&m.f, &m.d, err, acts.round); err != nil {
						return -1, err
					}
					return k, nil
				}
				acts.reserved = append(acts.reserved, rw)
			}
		}
	}
	return -1, nil
}

// refuseCollection answers 403: the request deletes nothing, and says
// which objects held it back and why.
func (i *Interceptor) refuseCollection(x exchange, f *facts, c *collection, verdict decision.CollectionVerdict) {
	for _, warning := range c.combined.RefusalWarnings() {
		x.w.Header().Add("Warning", formatWarning(warning))
	}
	for k := range c.members {
		m := &c.members[k]
		held := m.d.Result == decision.Deny
		outcome := "denied"
		if !held {
			// Allowed on its own; the request it came in was refused.
			outcome = "refused-with-collection"
		}
		i.recordDecision(&m.f, &m.d, outcome)
		if held && !c.dryRun {
			i.report(&m.f, &m.d)
		}
	}
	blocked := make([]*decision.Decision, len(verdict.Blocked))
	for n, k := range verdict.Blocked {
		blocked[n] = &c.members[k].d
	}
	x.writeError(x.w, &apierrors.StatusError{ErrStatus: c.combined.Refusal(f.req.w.gvr.GroupResource(), c.namespace, verdict, blocked)})
}

// reserve takes the once approval upd off its parent for f's write.
func (i *Interceptor) reserve(ctx context.Context, f *facts, upd *decision.ApprovalsUpdate) (sidewrites.Write, error) {
	wr := f.req.w
	rw := sidewrites.Write{Approval: upd, Operation: f.op, GVR: wr.gvr, Namespace: f.namespace, Name: wr.info.Name}
	if rw.Name == "" && f.sent != nil {
		rw.Name = f.sent.GetName()
	}
	if f.op != decision.Create && f.old != nil {
		rw.Before = decision.StoredState{Exists: true, UID: string(f.old.GetUID()), ResourceVersion: f.old.GetResourceVersion()}
	}
	stamps := ""
	if parent := reservedParent(f, upd); parent != nil {
		stamps = parent.GetAnnotations()[annotations.Reservations]
	}
	return i.approvals.Reserve(ctx, rw, stamps)
}

// reservedParent is the snapshot of the parent upd takes the approval
// off: the one the write joins, or the one it leaves.
func reservedParent(f *facts, upd *decision.ApprovalsUpdate) *unstructured.Unstructured {
	if p := f.formerParent.obj; p != nil && upd.Target == decision.RefOf(p) {
		return p
	}
	return f.parent.obj
}

// traceScaled records, after a /scale write succeeded, the annotations the
// decision gives the scaled object (its trace and updaters). A Scale body
// has no room for them and kube-apiserver keeps only the replicas of it, so
// they are written in a follow-up patch with the proxy's credentials. It
// runs in the background: the caller's write is done.
func (i *Interceptor) traceScaled(f *facts, d *decision.Decision) {
	if f.req.w.sub != scaleSubresource || d.ChildAnnotations.Empty() || f.new == nil {
		return
	}
	changes := *d.ChildAnnotations
	gvr, ns, name, scaled := f.req.w.gvr, f.namespace, f.req.w.info.Name, f.new
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), i.cfg.SideWriteTimeout)
		defer cancel()
		if err := i.sideWriter.AnnotateScaled(ctx, gvr, ns, name, scaled, changes); err != nil {
			i.cfg.Log.Warn("recording the trace of a /scale write failed", zap.String("resource", gvr.String()),
				zap.String("namespace", ns), zap.String("name", name), zap.Error(err))
		}
	}()
}

// readAll reads a replayable request body without consuming it.
func readAll(r *http.Request) ([]byte, error) {
	if r.GetBody == nil {
		return nil, nil
	}
	b, err := r.GetBody()
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	return io.ReadAll(b)
}

// watchParentKind makes the kind of f's parent one the proxy watches when
// d is a reason to (decision.WatchesParentKind) and its writer may write
// the status of the kind's objects in the parent's namespace. A parent of
// a kind not watched is read live for each write decided under it. The
// writer's status access is asked once per writer and kind at a time,
// beside the write: the write does not wait for it.
func (i *Interceptor) watchParentKind(f *facts, d *decision.Decision) {
	if f.parent.source == "gone" || !decision.WatchesParentKind(d, f.parent.obj) {
		return
	}
	parent := f.parent.obj
	gvk := parent.GroupVersionKind()
	if i.settled.Learns(gvk.GroupKind()) {
		return
	}
	u, who := f.req.user, d.Actor.User
	if u == nil {
		return
	}
	check := kindCheck{kind: gvk.GroupKind(), user: u.GetName()}
	if _, asking := i.kindChecks.LoadOrStore(check, true); asking {
		return
	}
	go func() {
		defer i.kindChecks.Delete(check)
		ctx, cancel := context.WithTimeout(context.Background(), kindCheckTimeout)
		defer cancel()
		if i.mayWriteStatusOf(ctx, u, parent) {
			i.watchKind(gvk, parent, "a write under one was decided for its controller, or under its allowances, by a writer who may write its status", who)
		}
	}()
}

// mayWriteStatusOf reports whether u may write the status of the objects
// of parent's kind in its namespace, in the object itself for a custom
// resource without a status subresource. For a kind whose definition
// cannot be read, the status subresource is asked about, as most kinds
// have one.
func (i *Interceptor) mayWriteStatusOf(ctx context.Context, u user.Info, parent *unstructured.Unstructured) bool {
	var inObject bool
	if i.cfg.Objects != nil {
		if m, err := i.cfg.Objects.Mapping(parent.GroupVersionKind()); err == nil {
			inObject, _ = i.scalePaths.StatusInObject(ctx, m.Resource)
		}
	}
	return i.access.MayWriteStatus(ctx, u, parent, inObject)
}

// kindCheck names a review of whether a writer may write the status of
// a kind's objects.
type kindCheck struct {
	kind schema.GroupKind
	user string
}

// kindCheckTimeout bounds the review of whether a controller may write
// its parent's status; a review not answered is asked again with a later
// write.
const kindCheckTimeout = 10 * time.Second

// watchKind makes gvk a kind the proxy watches: its objects are cached
// as parents from now on, and the settledness memory learns from each of
// their changes, starting with seen. A status write alone makes no kind
// watched: the pod garbage collector writes the status of Pods, under
// which nobody writes.
func (i *Interceptor) watchKind(gvk schema.GroupVersionKind, seen *unstructured.Unstructured, why, who string) {
	if i.settled.Learns(gvk.GroupKind()) {
		return
	}
	i.settled.AddParentKind(gvk.GroupKind())
	i.settled.Observe(seen)
	if i.cfg.Objects == nil {
		return
	}
	if err := i.cfg.Objects.AdmitParentKind(gvk); err != nil {
		i.cfg.Log.Warn("the parents of a kind cannot be cached; they are read live", zap.String("kind", gvk.String()), zap.Error(err))
		return
	}
	i.cfg.Log.Info("watching the objects of a kind as parents: "+why, zap.String("kind", gvk.String()),
		zap.String("object", cache.NewObjectName(seen.GetNamespace(), seen.GetName()).String()), zap.String("user", who))
}
