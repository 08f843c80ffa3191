package intercept

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/notify"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
)

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// maxReservationAttempts bounds the re-decide loop when reserving a once
// approval races another writer of the parent.
const maxReservationAttempts = 3

// pending is the state of one intercepted write.
type pending struct {
	w            *write
	settings     *config.Config
	controller   *config.Controller
	start        time.Time
	kind         schema.GroupVersionKind
	data         []byte
	format       body.Format
	patchTy      types.PatchType
	old          *unstructured.Unstructured
	new          *unstructured.Unstructured
	changed      bool
	changes      []decision.FieldChange
	parent       *unstructured.Unstructured
	parentSource string
	nsMode       string
	outcome      string // what finally happened, for the decision line
}

func (i *Interceptor) serveWrite(w http.ResponseWriter, r *http.Request, wr *write, forward http.Handler, writeError ErrorWriter) {
	p := &pending{w: wr, start: time.Now(), settings: i.cfg.Settings()}
	u, _ := request.UserFrom(r.Context())
	p.controller = p.settings.ControllerFor(u, wr.fieldManager)
	if p.shadow() {
		i.serveShadow(w, r, p, forward)
		return
	}
	fail := func(err error) {
		p.outcome = "error"
		i.logError(r, p, err)
		writeError(w, err)
	}

	data, tooLarge, err := readBody(r, i.cfg.MaxBodyBytes)
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
		var ignored *ignoredError
		if errors.As(err, &ignored) {
			// --failure-policy=Ignore: let the write through, say so.
			p.outcome = "ignored-failure"
			i.logError(r, p, err)
			w.Header().Add("Warning", formatWarning("kausality: no drift decision was made (--failure-policy=Ignore): "+ignored.Error()))
			forward.ServeHTTP(w, r)
			return
		}
		fail(err)
		return
	}
	if p.skip() {
		forward.ServeHTTP(w, r)
		return
	}

	var d decision.Decision
	for attempt := 1; ; attempt++ {
		d, err = i.decideConfirmed(r, p)
		if err != nil {
			fail(err)
			return
		}
		if d.Result == decision.Deny {
			i.deny(w, r, p, &d, writeError)
			return
		}
		if !d.ConsumeOnce || d.ApprovalsUpdate == nil || wr.dryRun {
			break
		}
		err := i.reserveApproval(r.Context(), d.ApprovalsUpdate)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt >= maxReservationAttempts {
			fail(apierrors.NewConflict(schema.GroupResource{Group: wr.gvr.Group, Resource: wr.gvr.Resource}, wr.info.Name,
				fmt.Errorf("could not reserve the once approval on %s: %v; retry the write", d.ApprovalsUpdate.Target, err)))
			return
		}
		// Someone else changed the parent (maybe took the approval): decide
		// again from a fresh snapshot.
		if err := i.refreshParent(r.Context(), p); err != nil {
			fail(err)
			return
		}
	}

	out, err := i.mutate(r, p, &d)
	if err != nil {
		if d.ConsumeOnce && d.ApprovalsUpdate != nil && !wr.dryRun {
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

	rec := &codeRecorder{ResponseWriter: w}
	forward.ServeHTTP(rec, out)
	succeeded := rec.code >= 200 && rec.code < 300
	p.outcome = "forwarded:" + strconv.Itoa(rec.code)

	if d.ConsumeOnce && d.ApprovalsUpdate != nil && !wr.dryRun && !succeeded {
		i.restoreApproval(d.ApprovalsUpdate)
	}
	if succeeded && !wr.dryRun {
		i.sideWrites(d.ParentWrites)
		i.report(r, p, &d)
	}
	i.logDecisionLine(p, &d, nil)
}

// report sends the DriftReport the decision calls for, once the outcome is
// known: after a denial, or after the upstream accepted the write (a
// reserved once approval is only really used then).
func (i *Interceptor) report(r *http.Request, p *pending, d *decision.Decision) {
	if i.cfg.Reports == nil {
		return
	}
	u, _ := request.UserFrom(r.Context())
	i.cfg.Reports.Observe(d, notify.Write{Operation: p.w.op, OldObject: p.old, NewObject: p.new,
		Changes: p.changes, User: u, FieldManager: p.w.fieldManager, DryRun: p.w.dryRun})
}

// decideConfirmed decides, and confirms a drift verdict made from the cache.
// The controller reacts to the same watch event as our cache; a cache a
// beat behind shows the parent as reconciled when its spec has just
// changed. Drift is rare, so it is confirmed with one live read and decided
// again from that single fresh snapshot.
func (i *Interceptor) decideConfirmed(r *http.Request, p *pending) (decision.Decision, error) {
	d := i.decide(r, p)
	if d.Drift && p.parentSource == string(objects.FromCache) {
		if err := i.refreshParent(r.Context(), p); err != nil {
			return d, err
		}
		d = i.decide(r, p)
	}
	return d, nil
}

// serveShadow handles a write of a controller in shadow mode: the full
// decision is computed and logged, and the request goes upstream exactly as
// it came: no annotation, no approval consumed, no denial, no warning, no
// side write. Whatever goes wrong while deciding is logged, never returned.
func (i *Interceptor) serveShadow(w http.ResponseWriter, r *http.Request, p *pending, forward http.Handler) {
	p.outcome = "shadow"
	data, tooLarge, err := readBody(r, i.cfg.MaxBodyBytes)
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
	rec := &codeRecorder{ResponseWriter: w}
	forward.ServeHTTP(rec, r)
	p.outcome = "shadow:" + strconv.Itoa(rec.code)
	switch {
	case err != nil:
		i.logError(r, p, err)
	case decided:
		i.logDecisionLine(p, &d, nil)
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

// readBody reads at most limit bytes. When the body is larger, the bytes
// read so far are put back in front of the rest, so the request can still
// be forwarded untouched.
func readBody(r *http.Request, limit int64) (data []byte, tooLarge bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		restoreBody(r, nil)
		return nil, false, nil
	}
	orig := r.Body
	data, err = io.ReadAll(io.LimitReader(orig, limit+1))
	if err != nil {
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

// shadow reports whether the writer's controller is in shadow mode.
func (p *pending) shadow() bool {
	return p.controller != nil && p.controller.Mode == config.ModeShadow
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
	return p.w.op == decision.Delete && p.old == nil
}

// load reads the stored object and computes the effective new one, the
// desired-state change and the parent snapshot.
func (i *Interceptor) load(r *http.Request, p *pending) error {
	ctx := r.Context()
	wr := p.w
	kind, err := i.cfg.Objects.KindFor(wr.gvr)
	if err != nil {
		return i.unresolvable(fmt.Errorf("resolving the kind of %s: %w", wr.gvr, err))
	}
	p.kind = kind
	if m, err := i.cfg.Objects.Mapping(kind); err == nil && m.Scope.Name() == meta.RESTScopeNameRoot {
		wr.namespace = ""
	}

	if wr.op != decision.Create {
		old, err := i.storedObject(ctx, wr, r.Header.Get("Content-Type"), p.data)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", kind.Kind, qualifiedName(wr.namespace, wr.info.Name), err))
		default:
			p.old = old
		}
	}

	switch {
	case wr.op == decision.Delete:
	case wr.sub == scaleSubresource:
		if p.old == nil {
			return apierrors.NewNotFound(wr.gvr.GroupResource(), wr.info.Name)
		}
		p.new, err = i.scaledObject(r, p)
		if err != nil {
			return err
		}
	case wr.verb == "patch":
		pt, err := patch.PatchTypeFor(r.Header.Get("Content-Type"))
		if err != nil {
			return err
		}
		p.patchTy = pt
		ns := wr.namespace
		// kube-apiserver type-checks the patched object itself; skipping our
		// copy of that check saves a third of a patch's cost.
		opts := patch.Options{FieldManager: wr.fieldManager, Kind: kind, Name: wr.info.Name, Namespace: &ns, SkipTypeCheck: true}
		if pt == types.ApplyYAMLPatchType || pt == types.ApplyCBORPatchType {
			opts.TypeConverter = builtinTC()
		}
		if f := r.URL.Query().Get("force"); f != "" {
			force := f == "true"
			opts.Force = &force
		}
		if r.URL.Query().Get("fieldManager") == "" && pt != types.ApplyYAMLPatchType && pt != types.ApplyCBORPatchType {
			opts.FieldManager = ""
		}
		p.new, err = patch.Apply(pt, p.old, p.data, opts)
		if err != nil {
			return err
		}
		if p.old == nil {
			wr.op = decision.Create // an apply that creates
		}
	default:
		obj, format, err := body.Decode(r.Header.Get("Content-Type"), p.data, &kind)
		if err != nil {
			return err
		}
		p.new, p.format = obj, format
		if wr.op == decision.Update && p.old == nil {
			wr.op = decision.Create // create-on-update (PUT of a missing object)
		}
		if p.new.GetNamespace() == "" && wr.namespace != "" {
			p.new.SetNamespace(wr.namespace)
		}
	}

	if wr.sub != statusSubresource {
		p.changed, p.changes = desiredChange(wr.op, p.old, p.new)
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
	if ns := wr.namespace; ns != "" {
		nsObj, _, err := i.cfg.Objects.GetShared(ctx, namespacesGVR, "", ns)
		if err == nil {
			p.nsMode = nsObj.GetAnnotations()[annotations.Mode]
		}
	}
	return nil
}

// storedObject reads the object the write applies to. An update carries
// the resourceVersion it was based on; when the cache holds an older one
// the cache is behind, and a live read gives the real stored object.
func (i *Interceptor) storedObject(ctx context.Context, wr *write, contentType string, data []byte) (*unstructured.Unstructured, error) {
	old, source, err := i.cfg.Objects.Get(ctx, wr.gvr, wr.namespace, wr.info.Name)
	if err != nil || source != "cache" || wr.verb != "update" {
		return old, err
	}
	if rv := resourceVersionOf(contentType, data); rv != "" && rv != old.GetResourceVersion() {
		return i.cfg.Objects.GetLive(ctx, wr.gvr, wr.namespace, wr.info.Name)
	}
	return old, nil
}

func resourceVersionOf(contentType string, data []byte) string {
	obj, _, err := body.Decode(contentType, data, nil)
	if err != nil {
		return ""
	}
	return obj.GetResourceVersion()
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
	parent, source, err := i.cfg.Objects.GetKindShared(ctx, gv.WithKind(ref.Kind), p.w.namespace, ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		// The parent is gone: garbage collection is cleaning up, which is
		// allowed like any write under a deleting parent.
		p.parent = goneParent(ref, p.w.namespace)
		p.parentSource = "gone"
		return nil
	case err != nil:
		return i.unresolvable(fmt.Errorf("reading the parent %s %s: %w", ref.Kind, ref.Name, err))
	}
	if ref.UID != "" && parent.GetUID() != ref.UID {
		p.parent = goneParent(ref, p.w.namespace)
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
	if err != nil {
		return i.unresolvable(fmt.Errorf("re-reading the parent: %w", err))
	}
	p.parent = fresh
	p.parentSource = "live"
	return nil
}

// unresolvable applies --failure-policy Fail: the write is refused with a
// retryable error. (Ignore is handled by the caller of decide.)
func (i *Interceptor) unresolvable(err error) error {
	if i.cfg.FailurePolicy == FailurePolicyIgnore {
		return &ignoredError{err}
	}
	var status apierrors.APIStatus
	var netErr net.Error
	if (errors.As(err, &status) && status.Status().Code == http.StatusServiceUnavailable) || errors.As(err, &netErr) {
		// The upstream could not be reached: retryable.
		e := apierrors.NewServiceUnavailable(fmt.Sprintf("kausality-proxy cannot decide about this write (--failure-policy=Fail): %v", err))
		e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		return e
	}
	return apierrors.NewInternalError(fmt.Errorf("kausality-proxy cannot decide about this write (--failure-policy=Fail): %w", err))
}

// ignoredError marks a failure that --failure-policy=Ignore lets through.
type ignoredError struct{ err error }

func (e *ignoredError) Error() string { return e.err.Error() }

func (i *Interceptor) decide(r *http.Request, p *pending) decision.Decision {
	u, _ := request.UserFrom(r.Context())
	in := decision.Input{
		Operation:      p.w.op,
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
		Lifecycle:      p.settings.Lifecycle,
	}
	if p.controller != nil && p.controller.Mode != config.ModeShadow {
		in.Mode.Controller = string(p.controller.Mode)
	}
	in.Child = decision.ObjectRef{APIVersion: p.kind.GroupVersion().String(), Kind: p.kind.Kind, Namespace: p.w.namespace, Name: p.w.info.Name}
	if in.Child.Name == "" && p.new != nil {
		in.Child.Name = p.new.GetName()
		if in.Child.Name == "" {
			in.Child.Name = p.new.GetGenerateName()
		}
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
	i.logDecisionLine(p, d, nil)
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
		changes := make(map[string]*string, len(d.ChildAnnotations.Set)+len(d.ChildAnnotations.Remove))
		for k, v := range d.ChildAnnotations.Set {
			v := v
			changes[k] = &v
		}
		for _, k := range d.ChildAnnotations.Remove {
			changes[k] = nil
		}
		data, err = patch.AddAnnotations(p.patchTy, p.data, changes, p.new)
		if errors.Is(err, patch.ErrNotRewritable) {
			d.Warnings = append(d.Warnings, "kausality: this patch replaces all annotations, so the causal trace could not be recorded")
			return r, nil
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
func desiredChange(op decision.Operation, old, new *unstructured.Unstructured) (bool, []decision.FieldChange) {
	switch op {
	case decision.Delete:
		return true, nil
	}
	changed, changes := desired.Changed(old, new)
	out := make([]decision.FieldChange, 0, len(changes))
	for _, c := range changes {
		out = append(out, decision.FieldChange{Path: c.Path, Old: c.Old, New: c.New})
	}
	return changed, out
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

// codeRecorder remembers the upstream's response code, passing flushes
// through.
type codeRecorder struct {
	http.ResponseWriter
	code int
}

func (c *codeRecorder) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *codeRecorder) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.ResponseWriter.Write(b)
}

func (c *codeRecorder) Flush() { http.NewResponseController(c.ResponseWriter).Flush() }

func (c *codeRecorder) Unwrap() http.ResponseWriter { return c.ResponseWriter }
