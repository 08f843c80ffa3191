package intercept

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/notify"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/internal/httpx"
)

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// maxReservationAttempts bounds the re-decide loop when reserving a once
// approval races another writer of the parent.
const maxReservationAttempts = 3

// pending is the state of one intercepted write.
type pending struct {
	// w is the classification: final, never rewritten.
	w *write
	// op is the effective operation: an apply or a PUT of an object that
	// does not exist is a create.
	op decision.Operation
	// namespace is the object's: the request's, or "" for cluster-scoped
	// resources (kube-apiserver's request info names a Namespace object's
	// own name as its namespace).
	namespace  string
	settings   *config.Config
	controller *config.Controller
	clock      clock.PassiveClock
	start      time.Time
	kind       schema.GroupVersionKind
	data       []byte
	format     body.Format
	patchTy    types.PatchType
	old        *unstructured.Unstructured
	new        *unstructured.Unstructured
	changed    bool
	changes    []desired.Change
	// shownChanges are the changes messages may show: nil until a drift
	// verdict asks, then changes, or changes without their values.
	shownChanges []desired.Change
	parent       *unstructured.Unstructured
	parentSource string
	nsMode       string
	outcome      string // what finally happened, for the decision line
}

func (i *Interceptor) serveWrite(w http.ResponseWriter, r *http.Request, wr *write, forward http.Handler, writeError ErrorWriter) {
	p := &pending{w: wr, op: wr.op, namespace: wr.namespace, clock: i.cfg.Clock, start: i.cfg.Clock.Now(), settings: i.cfg.Settings()}
	u, _ := request.UserFrom(r.Context())
	p.controller = p.settings.ControllerFor(u, wr.fieldManager)
	fail := func(err error) {
		p.outcome = "error"
		i.logError(r, p, err)
		writeError(w, err)
	}

	// Nothing is read, decoded or written for a caller who may not write.
	if err := i.authorizeWrite(r.Context(), u, wr); err != nil {
		i.refuseUnauthorized(w, r, p, err, forward, writeError)
		return
	}

	if p.shadow() {
		i.serveShadow(w, r, p, forward)
		return
	}

	data, tooLarge, err := readBody(w, r, i.cfg.MaxBodyBytes)
	if err != nil {
		fail(err)
		return
	}
	if tooLarge {
		fail(apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the body of this intercepted write exceeds the proxy's limit of %d bytes (--max-request-body-bytes)", i.cfg.MaxBodyBytes)))
		return
	}
	p.data = data

	if err := i.load(r, p); err != nil {
		if !i.forwardIgnored(w, r, p, err, forward) {
			fail(err)
		}
		return
	}
	if p.skip() {
		forward.ServeHTTP(w, r)
		return
	}

	d, proceed := i.decideAndReserve(w, r, p, forward, writeError)
	if !proceed {
		return
	}
	reserved := d.ConsumeOnce && d.ApprovalsUpdate != nil && !wr.dryRun

	out, err := i.mutate(r, p, &d)
	if err != nil {
		if reserved {
			i.restoreApproval(d.ApprovalsUpdate)
		}
		fail(err)
		return
	}
	for _, warning := range d.Warnings {
		w.Header().Add("Warning", formatWarning(warning))
	}
	if wr.dryRun {
		w.Header().Add("Warning", formatWarning(fmt.Sprintf("kausality dry-run: %s (%s): %s", d.Result, d.Category, d.Reason)))
	}

	rec := httpx.NewCodeRecorder(w)
	forward.ServeHTTP(rec, out)
	succeeded := rec.Code() >= 200 && rec.Code() < 300
	p.outcome = "forwarded:" + strconv.Itoa(rec.Code())

	// Only a conflict is certain to have left the object unwritten, and a
	// conflict is what a write that passed its dry run meets in a race.
	// Anything else (a broken connection, a timeout, a 5xx) may have been
	// applied: putting the approval back could let it admit a second write.
	if reserved && rec.Code() == http.StatusConflict {
		i.restoreApproval(d.ApprovalsUpdate)
	}
	if succeeded && !wr.dryRun {
		if wr.sub == statusSubresource {
			i.learnStatus(p)
		}
		i.sideWrites(d.ParentWrites)
		i.report(r, p, &d)
	}
	i.recordDecision(p, &d)
}

// learnStatus tells the settledness memory about a status write that
// kube-apiserver accepted, before the cache sees it: the status is the
// write's, the spec is the stored one (a status write never changes it,
// whatever spec its body carries).
func (i *Interceptor) learnStatus(p *pending) {
	if p.old == nil || p.new == nil {
		return
	}
	status, ok := p.new.Object["status"]
	if !ok {
		return
	}
	obj := &unstructured.Unstructured{Object: make(map[string]interface{}, len(p.old.Object))}
	for k, v := range p.old.Object {
		obj.Object[k] = v
	}
	obj.Object["status"] = status
	i.settled.Observe(obj)
}

// forwardIgnored lets a write through undecided when err is a failure
// --failure-policy=Ignore covers, and says so to the caller. It reports
// whether it answered.
func (i *Interceptor) forwardIgnored(w http.ResponseWriter, r *http.Request, p *pending, err error, forward http.Handler) bool {
	var ignored *ignoredError
	if !errors.As(err, &ignored) {
		return false
	}
	p.outcome = "ignored-failure"
	i.logError(r, p, err)
	w.Header().Add("Warning", formatWarning("kausality: no drift decision was made (--failure-policy=Ignore): "+ignored.Error()))
	forward.ServeHTTP(w, r)
	return true
}

// refuseUnauthorized answers a write whose caller is not known to be
// allowed to make it.
func (i *Interceptor) refuseUnauthorized(w http.ResponseWriter, r *http.Request, p *pending, err error, forward http.Handler, writeError ErrorWriter) {
	var unavailable *authorizationUnavailableError
	switch {
	case p.shadow():
		// Shadow changes nothing: kube-apiserver answers as it would
		// without the proxy.
		p.outcome = "shadow:not-authorized"
		forward.ServeHTTP(w, r)
	case errors.As(err, &unavailable) && decision.OnFailure(i.cfg.FailurePolicy, decision.Unreachable).Forward:
		p.outcome = "ignored-failure"
		i.logError(r, p, err)
		w.Header().Add("Warning", formatWarning("kausality: no drift decision was made (--failure-policy=Ignore): "+err.Error()))
		forward.ServeHTTP(w, r)
	case errors.As(err, &unavailable):
		p.outcome = "error"
		i.logError(r, p, err)
		writeError(w, unavailable.status())
	default:
		p.outcome = "not-authorized"
		writeError(w, err)
	}
}

// decideAndReserve decides the write and, when it consumes a once
// approval, reserves the approval on the parent. It reports false when it
// has answered the request itself (a denial, an error, a refused dry run).
func (i *Interceptor) decideAndReserve(w http.ResponseWriter, r *http.Request, p *pending, forward http.Handler, writeError ErrorWriter) (decision.Decision, bool) {
	wr := p.w
	fail := func(err error) {
		p.outcome = "error"
		i.logError(r, p, err)
		writeError(w, err)
	}
	preflighted := false
	for attempt := 1; ; attempt++ {
		d, err := i.decideConfirmed(r, p)
		if err != nil {
			if !i.forwardIgnored(w, r, p, err, forward) {
				fail(err)
			}
			return d, false
		}
		if d.Result == decision.Deny {
			i.deny(w, r, p, &d, writeError)
			return d, false
		}
		if !d.ConsumeOnce || d.ApprovalsUpdate == nil || wr.dryRun {
			return d, true
		}
		// A once approval is written off the parent before the write is
		// forwarded. That is a write with the proxy's credentials, so it is
		// made only for a write kube-apiserver is going to accept: a dry
		// run as the caller answers that first.
		if !preflighted {
			out, err := i.mutate(r, p, &d)
			if err != nil {
				fail(err)
				return d, false
			}
			if !i.preflight(w, out, forward, writeError) {
				p.outcome = "dry-run-refused"
				i.recordDecision(p, &d)
				return d, false
			}
			preflighted = true
		}
		err = i.reserveApproval(r.Context(), d.ApprovalsUpdate)
		if err == nil {
			return d, true
		}
		switch decision.OnReservationError(reservationError(err), attempt, maxReservationAttempts) {
		case decision.RefuseRetryable:
			fail(apierrors.NewConflict(schema.GroupResource{Group: wr.gvr.Group, Resource: wr.gvr.Resource}, wr.info.Name,
				fmt.Errorf("could not reserve the once approval on %s: the parent kept changing (%v); retry the write", d.ApprovalsUpdate.Target, err)))
			return d, false
		case decision.RefuseAsFailure:
			err = i.unresolvable(fmt.Errorf("reserving the once approval on %s: %w", d.ApprovalsUpdate.Target, err))
			if !i.forwardIgnored(w, r, p, err, forward) {
				fail(err)
			}
			return d, false
		}
		// Someone else changed the parent (maybe took the approval), or
		// deleted it: decide again from a fresh snapshot.
		if err := i.refreshParent(r.Context(), p); err != nil {
			if !i.forwardIgnored(w, r, p, err, forward) {
				fail(err)
			}
			return d, false
		}
	}
}

// reservationError classifies a failed reservation for the decision.
func reservationError(err error) decision.ReservationError {
	switch {
	case apierrors.IsConflict(err):
		return decision.ReservationConflict
	case apierrors.IsNotFound(err):
		return decision.ReservationParentGone
	}
	return decision.ReservationFailed
}

// preflight sends out as a server-side dry run and reports whether
// kube-apiserver would accept it. When it would not, its answer has been
// written to w and nothing was changed anywhere.
func (i *Interceptor) preflight(w http.ResponseWriter, out *http.Request, forward http.Handler, writeError ErrorWriter) bool {
	dry := out.Clone(out.Context())
	q := dry.URL.Query()
	q.Add("dryRun", "All")
	dry.URL.RawQuery = q.Encode()
	dry.RequestURI = ""
	if out.GetBody != nil {
		b, err := out.GetBody()
		if err == nil {
			dry.Body = b
		}
	}
	rec := newBufferedResponse(maxPreflightAnswer)
	forward.ServeHTTP(rec, dry)
	if rec.code >= 200 && rec.code < 300 {
		return true
	}
	rec.replay(w, writeError)
	return false
}

// report sends the DriftReport the decision calls for, once the outcome is
// known: after a denial, or after the upstream accepted the write (a
// reserved once approval is only really used then).
func (i *Interceptor) report(r *http.Request, p *pending, d *decision.Decision) {
	if i.cfg.Reports == nil {
		return
	}
	u, _ := request.UserFrom(r.Context())
	i.cfg.Reports.Observe(d, notify.Write{Operation: p.op, OldObject: p.old, NewObject: p.new,
		Changes: p.changes, User: u, FieldManager: p.w.fieldManager, DryRun: p.w.dryRun})
}

// decideConfirmed decides, and confirms a drift verdict made from the cache.
// The controller reacts to the same watch event as our cache; a cache a
// beat behind shows the parent as reconciled when its spec has just
// changed. Drift is rare, so it is confirmed with one live read and decided
// again from that single fresh snapshot.
func (i *Interceptor) decideConfirmed(r *http.Request, p *pending) (decision.Decision, error) {
	d := i.decide(r, p)
	if decision.NeedsConfirmation(&d, p.parentSource == string(objects.FromCache)) {
		if err := i.refreshParent(r.Context(), p); err != nil {
			return d, err
		}
		d = i.decide(r, p)
	}
	if d.Drift && p.shownChanges == nil && len(p.changes) > 0 {
		// A drift message lists the changed fields with their stored and
		// new values. The stored ones are shown only to a caller who may
		// read the object, and never for a Secret.
		p.shownChanges = p.changes
		u, _ := request.UserFrom(r.Context())
		if p.kind.GroupKind() == (schema.GroupKind{Kind: "Secret"}) || !i.mayRead(r.Context(), u, p.w) {
			p.shownChanges = withoutValues(p.changes)
			d = i.decide(r, p)
		}
	}
	return d, nil
}

// withoutValues keeps only the paths of changes.
func withoutValues(changes []desired.Change) []desired.Change {
	out := make([]desired.Change, len(changes))
	for i, c := range changes {
		out[i] = desired.Change{Path: c.Path}
	}
	return out
}

// serveShadow handles a write of a controller in shadow mode: the full
// decision is computed and logged, and the request goes upstream exactly as
// it came: no annotation, no approval consumed, no denial, no warning, no
// side write. Whatever goes wrong while deciding is logged, never returned.
func (i *Interceptor) serveShadow(w http.ResponseWriter, r *http.Request, p *pending, forward http.Handler) {
	p.outcome = "shadow"
	data, tooLarge, err := readBody(w, r, i.cfg.MaxBodyBytes)
	if err != nil || tooLarge {
		if err == nil {
			err = fmt.Errorf("body larger than %d bytes: not decided", i.cfg.MaxBodyBytes)
		}
		i.logError(r, p, err)
		forward.ServeHTTP(w, r)
		return
	}
	d, decided, err := i.shadowDecision(r, p, data)
	restoreBody(r, data)
	rec := httpx.NewCodeRecorder(w)
	forward.ServeHTTP(rec, r)
	p.outcome = "shadow:" + strconv.Itoa(rec.Code())
	switch {
	case err != nil:
		i.logError(r, p, err)
	case decided:
		i.recordDecision(p, &d)
	}
}

// shadowDecision decides a shadow write. Nothing that goes wrong here,
// a panic included, may keep the request from being forwarded.
func (i *Interceptor) shadowDecision(r *http.Request, p *pending, data []byte) (d decision.Decision, decided bool, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			i.cfg.Log.Error("panic while deciding a shadow write", zap.Any("panic", rec), zap.Stack("stack"))
			err = fmt.Errorf("panic while deciding: %v", rec)
		}
	}()
	p.data = data
	if err := i.load(r, p); err != nil {
		return d, false, err
	}
	if p.skip() {
		return d, false, nil
	}
	d, err = i.decideConfirmed(r, p)
	return d, err == nil, err
}

// readBody reads at most limit bytes, within the request's deadline: a
// body trickled in a byte at a time must not hold a write (and its memory)
// for longer than any other request may take. When the body is larger than
// limit, the bytes read so far are put back in front of the rest, so the
// request can still be forwarded untouched.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (data []byte, tooLarge bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		restoreBody(r, nil)
		return nil, false, nil
	}
	if deadline, ok := r.Context().Deadline(); ok {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(deadline) == nil {
			// The connection may serve further requests.
			defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
		}
	}
	orig := r.Body
	data, err = io.ReadAll(io.LimitReader(orig, limit+1))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || r.Context().Err() != nil {
			return nil, false, bodyTimeout()
		}
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
	}
	if int64(len(data)) > limit {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), orig), orig}
		return data, true, nil
	}
	_ = orig.Close()
	restoreBody(r, data)
	return data, false, nil
}

func bodyTimeout() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusGatewayTimeout,
		Reason:  metav1.StatusReasonTimeout,
		Message: "the request body did not arrive within the proxy's --request-timeout (or the request's shorter ?timeout=); nothing was written",
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
	}}
}

// elapsed is how long the write has taken so far.
func (p *pending) elapsed() time.Duration { return p.clock.Since(p.start) }

// shadow reports whether the writer's controller is in shadow mode.
func (p *pending) shadow() bool {
	return p.controller != nil && p.controller.Mode == annotations.ModeShadow
}

// controllerName is the configured name of the writer's controller.
func (p *pending) controllerName() string {
	if p.controller == nil {
		return ""
	}
	return p.controller.Name
}

// skip reports writes that turned out to need no decision.
func (p *pending) skip() bool {
	// Deleting what does not exist: the upstream answers 404 itself.
	return p.op == decision.Delete && p.old == nil
}

// load reads the stored object and computes the effective new one, the
// desired-state change and the parent snapshot.
func (i *Interceptor) load(r *http.Request, p *pending) error {
	ctx := r.Context()
	wr := p.w
	kind, err := i.cfg.Objects.KindFor(wr.gvr)
	if meta.IsNoMatchError(err) {
		return resourceNotFound()
	}
	if err != nil {
		return i.unresolvable(fmt.Errorf("resolving the kind of %s: %w", wr.gvr, err))
	}
	m, err := i.cfg.Objects.Mapping(kind)
	if err != nil {
		return i.unresolvable(fmt.Errorf("resolving the resource of %s: %w", kind, err))
	}
	// Discovery matches resource names in any case; kube-apiserver serves
	// only the canonical spelling. Anything else is not a resource, and
	// must not become a cache of its own.
	if m.Resource != wr.gvr {
		return resourceNotFound()
	}
	p.kind = kind
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		p.namespace = ""
	}

	// A whole object in the body is decoded once, before any read: a body
	// that cannot be decoded costs no I/O, and its resourceVersion tells
	// whether the cache is behind.
	var decoded *unstructured.Unstructured
	if p.op != decision.Delete && wr.sub != scaleSubresource && wr.verb != "patch" {
		obj, format, err := body.Decode(r.Header.Get("Content-Type"), p.data, &kind)
		if err != nil {
			return err
		}
		decoded, p.format = obj, format
	}

	if p.op != decision.Create {
		old, err := i.storedObject(ctx, wr, p.namespace, decoded)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", kind.Kind, qualifiedName(p.namespace, wr.info.Name), err))
		default:
			p.old = old
		}
	}

	switch {
	case p.op == decision.Delete:
	case wr.sub == scaleSubresource:
		if p.old == nil {
			return apierrors.NewNotFound(wr.gvr.GroupResource(), wr.info.Name)
		}
		p.new, err = i.scaledObject(r, p)
		if err != nil {
			return err
		}
	case wr.verb == "patch":
		pt, err := patch.TypeFor(r.Header.Get("Content-Type"))
		if err != nil {
			return err
		}
		p.patchTy = pt
		ns := p.namespace
		// kube-apiserver type-checks the patched object itself; skipping our
		// copy of that check saves a third of a patch's cost.
		opts := patch.Options{FieldManager: wr.fieldManager, Kind: kind, Name: wr.info.Name, Namespace: &ns, SkipTypeCheck: true}
		if pt == types.ApplyYAMLPatchType || pt == types.ApplyCBORPatchType {
			opts.TypeConverter = builtinTC()
		}
		if f := r.URL.Query()["force"]; len(f) > 0 {
			// kube-apiserver's query conversion: anything but 0, false or
			// no (any case) is true, and the first value counts.
			if err := runtime.Convert_Slice_string_To_Pointer_bool(&f, &opts.Force, nil); err != nil {
				return apierrors.NewBadRequest(fmt.Sprintf("the force parameter: %v", err))
			}
		}
		if r.URL.Query().Get("fieldManager") == "" && pt != types.ApplyYAMLPatchType && pt != types.ApplyCBORPatchType {
			opts.FieldManager = ""
		}
		p.new, err = patch.Apply(pt, p.old, p.data, opts)
		if err != nil {
			return err
		}
		if p.old == nil {
			p.op = decision.Create // an apply that creates
		}
	default:
		p.new = decoded
		if p.op == decision.Update && p.old == nil {
			p.op = decision.Create // create-on-update (PUT of a missing object)
		}
		if p.new.GetNamespace() == "" && p.namespace != "" {
			p.new.SetNamespace(p.namespace)
		}
	}

	if wr.sub != statusSubresource {
		p.changed, p.changes = desiredChange(p.op, p.old, p.new)
	}

	// The parent: the controller owner of the object after the write (of
	// the stored object for deletes).
	owned := p.new
	if owned == nil {
		owned = p.old
	}
	if err := i.resolveParent(ctx, p, owned); err != nil {
		return err
	}
	if ns := p.namespace; ns != "" {
		nsObj, _, err := i.cfg.Objects.GetShared(ctx, namespacesGVR, "", ns)
		if err == nil {
			p.nsMode = nsObj.GetAnnotations()[annotations.Mode]
		}
	}
	return nil
}

// storedObject reads the object the write applies to. An update carries
// the resourceVersion it was based on (in decoded); when the cache holds an
// older one the cache is behind, and a live read gives the real stored
// object.
func (i *Interceptor) storedObject(ctx context.Context, wr *write, namespace string, decoded *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	old, source, err := i.cfg.Objects.Get(ctx, wr.gvr, namespace, wr.info.Name)
	if err != nil || source != "cache" || decoded == nil || wr.verb != "update" {
		return old, err
	}
	if rv := decoded.GetResourceVersion(); rv != "" && rv != old.GetResourceVersion() {
		return i.cfg.Objects.GetLive(ctx, wr.gvr, namespace, wr.info.Name)
	}
	return old, nil
}

func (i *Interceptor) resolveParent(ctx context.Context, p *pending, owned *unstructured.Unstructured) error {
	if owned == nil {
		return nil
	}
	ref := metav1.GetControllerOfNoCopy(owned)
	if ref == nil {
		return nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the controller ownerReference has an invalid apiVersion %q: %v", ref.APIVersion, err))
	}
	// The parent snapshot is only read: no copy of the cached object.
	parent, source, err := i.cfg.Objects.GetKindShared(ctx, gv.WithKind(ref.Kind), p.namespace, ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		// The parent is gone: garbage collection is cleaning up, which is
		// allowed like any write under a deleting parent.
		p.parent = goneParent(ref, p.namespace)
		p.parentSource = "gone"
		return nil
	case err != nil:
		return i.unresolvable(fmt.Errorf("reading the parent %s %s: %w", ref.Kind, ref.Name, err))
	}
	if ref.UID != "" && parent.GetUID() != ref.UID {
		p.parent = goneParent(ref, p.namespace)
		p.parentSource = "gone"
		return nil
	}
	p.parent = parent
	p.parentSource = string(source)
	return nil
}

// goneParent stands in for a parent that no longer exists: deleting.
func goneParent(ref *metav1.OwnerReference, namespace string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(ref.APIVersion)
	u.SetKind(ref.Kind)
	u.SetName(ref.Name)
	u.SetNamespace(namespace)
	u.SetUID(ref.UID)
	now := metav1.Now()
	u.SetDeletionTimestamp(&now)
	return u
}

// refreshParent replaces the snapshot with a live read.
func (i *Interceptor) refreshParent(ctx context.Context, p *pending) error {
	if p.parent == nil {
		return nil
	}
	m, err := i.cfg.Objects.Mapping(p.parent.GroupVersionKind())
	if err != nil {
		return i.unresolvable(err)
	}
	ns := p.parent.GetNamespace()
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		ns = ""
	}
	fresh, err := i.cfg.Objects.GetLive(ctx, m.Resource, ns, p.parent.GetName())
	if apierrors.IsNotFound(err) {
		ref := metav1.OwnerReference{APIVersion: p.parent.GetAPIVersion(), Kind: p.parent.GetKind(), Name: p.parent.GetName(), UID: p.parent.GetUID()}
		p.parent, p.parentSource = goneParent(&ref, p.namespace), "gone"
		return nil
	}
	if err != nil {
		return i.unresolvable(fmt.Errorf("re-reading the parent: %w", err))
	}
	p.parent = fresh
	p.parentSource = "live"
	return nil
}

// unresolvable carries out the failure policy for a fact that could not
// be read: an ignoredError the caller forwards, or the refusal.
func (i *Interceptor) unresolvable(err error) error {
	kind := decision.Unreadable
	var status apierrors.APIStatus
	var netErr net.Error
	if (errors.As(err, &status) && status.Status().Code == http.StatusServiceUnavailable) || errors.As(err, &netErr) {
		kind = decision.Unreachable
	}
	action := decision.OnFailure(i.cfg.FailurePolicy, kind)
	switch {
	case action.Forward:
		return &ignoredError{err}
	case action.Code == http.StatusServiceUnavailable:
		e := apierrors.NewServiceUnavailable(fmt.Sprintf("kausality-proxy cannot decide about this write (--failure-policy=Fail): %v", err))
		e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		return e
	}
	return apierrors.NewInternalError(fmt.Errorf("kausality-proxy cannot decide about this write (--failure-policy=Fail): %w", err))
}

// resourceNotFound is kube-apiserver's answer for a path that names no
// resource it serves.
func resourceNotFound() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{},
	}}
}

// ignoredError marks a failure that --failure-policy=Ignore lets through.
type ignoredError struct{ err error }

func (e *ignoredError) Error() string { return e.err.Error() }

func (i *Interceptor) decide(r *http.Request, p *pending) decision.Decision {
	u, _ := request.UserFrom(r.Context())
	in := decision.Input{
		Operation:      p.op,
		OldObject:      p.old,
		NewObject:      p.new,
		DesiredChanged: p.changed,
		Changes:        p.changes,
		StatusWrite:    p.w.sub == statusSubresource,
		Parent:         p.parent,
		User:           u,
		FieldManager:   p.w.fieldManager,
		Mode:           decision.ModeInputs{Namespace: p.nsMode, Default: i.cfg.DefaultMode},
		DryRun:         p.w.dryRun,
		Now:            i.cfg.Clock.Now(),
		Lifecycle:      p.settings.Lifecycle,
		UngatedKinds:   p.settings.UngatedChildKinds,
	}
	if p.controller != nil && p.controller.Mode != annotations.ModeShadow {
		in.Mode.Controller = string(p.controller.Mode)
	}
	in.Child = decision.ObjectRef{APIVersion: p.kind.GroupVersion().String(), Kind: p.kind.Kind, Namespace: p.namespace, Name: p.w.info.Name}
	if in.Child.Name == "" && p.new != nil {
		in.Child.Name = p.new.GetName()
		if in.Child.Name == "" {
			in.Child.Name = p.new.GetGenerateName()
		}
	}
	if p.shownChanges != nil {
		in.Changes = p.shownChanges
	}
	if p.parent != nil && p.parentSource != "gone" {
		facts := i.settled.Assess(p.parent)
		in.Settle = &facts
	}
	return decision.Decide(in)
}

func (i *Interceptor) deny(w http.ResponseWriter, r *http.Request, p *pending, d *decision.Decision, writeError ErrorWriter) {
	p.outcome = "denied"
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
			Group:  p.w.gvr.Group,
			Kind:   p.w.gvr.Resource,
			Causes: d.Causes,
		},
	}}
	i.recordDecision(p, d)
	writeError(w, err)
	if !p.w.dryRun {
		i.report(r, p, d)
	}
}

// mutate returns the request to forward: unchanged, or with the child
// annotation changes the decision asks for written into its body.
func (i *Interceptor) mutate(r *http.Request, p *pending, d *decision.Decision) (*http.Request, error) {
	if d.ChildAnnotations.Empty() || p.new == nil || p.w.sub != mainResource {
		return r, nil
	}
	var (
		data        []byte
		contentType = r.Header.Get("Content-Type")
		err         error
	)
	if p.w.verb == "patch" {
		data, err = patch.AddAnnotations(p.patchTy, p.data, d.ChildAnnotations.Pointers(), p.new)
		if errors.Is(err, patch.ErrNotRewritable) {
			// Forwarding it would remove every kausality.io annotation,
			// the object's own mode and the trace included.
			return nil, apierrors.NewInvalid(p.kind.GroupKind(), p.w.info.Name, field.ErrorList{field.Forbidden(
				field.NewPath("metadata", "annotations"),
				"kausality-proxy: this patch replaces metadata.annotations as a whole, which would drop the kausality.io annotations the proxy keeps on this object; patch individual annotation keys instead")})
		}
	} else {
		obj := p.new.DeepCopy()
		d.ChildAnnotations.Apply(obj)
		data, contentType, err = body.Encode(obj, p.format)
	}
	if err != nil {
		return nil, err
	}
	out := r.Clone(r.Context())
	restoreBody(out, data)
	out.Header.Set("Content-Type", contentType)
	return out, nil
}

func restoreBody(r *http.Request, data []byte) {
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	r.Header.Set("Content-Length", strconv.Itoa(len(data)))
}

// desiredChange reports whether the write changes the desired state.
func desiredChange(op decision.Operation, old, new *unstructured.Unstructured) (bool, []desired.Change) {
	switch op {
	case decision.Delete:
		return true, nil
	}
	return desired.Changed(old, new)
}

// formatWarning renders an RFC 7234 warning as kube-apiserver does.
func formatWarning(text string) string {
	text = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, text)
	return `299 - ` + strconv.Quote(text)
}

func qualifiedName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// maxPreflightAnswer bounds what is kept of a dry run's answer; only a
// refusal is relayed, and refusals are small Status objects.
const maxPreflightAnswer = 1 << 20

// bufferedResponse holds an answer that may or may not be relayed.
type bufferedResponse struct {
	header    http.Header
	code      int
	body      bytes.Buffer
	limit     int
	truncated bool
}

func newBufferedResponse(limit int) *bufferedResponse {
	return &bufferedResponse{header: http.Header{}, limit: limit}
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	if room := b.limit - b.body.Len(); room < len(p) {
		b.truncated = true
		b.body.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.body.Write(p)
}

// replay writes the held answer to w, or a Status saying what happened when
// it was too large to hold.
func (b *bufferedResponse) replay(w http.ResponseWriter, writeError ErrorWriter) {
	if b.truncated || b.code == 0 {
		code := int32(http.StatusBadGateway)
		if b.code >= 400 && b.code <= 599 {
			code = int32(b.code)
		}
		writeError(w, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code,
			Message: fmt.Sprintf("kube-apiserver refused a dry run of this write with %d, and its answer was too large to relay; nothing was written", b.code)}})
		return
	}
	for k, vs := range b.header {
		if strings.EqualFold(k, "Content-Length") {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(b.code)
	_, _ = w.Write(b.body.Bytes())
}

// builtinTC types server-side apply of built-in kinds with the schema
// client-go embeds; it is parsed once, on the first apply.
var (
	builtinConverterOnce sync.Once
	builtinConverter     managedfields.TypeConverter
)

func builtinTC() managedfields.TypeConverter {
	builtinConverterOnce.Do(func() { builtinConverter = patch.NewBuiltinTypeConverter(nil) })
	return builtinConverter
}
