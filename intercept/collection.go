// deletecollection: kube-apiserver turns one request into the deletes of
// every matching object, server-side, where the proxy never sees them. So
// the proxy lists what the request would delete, decides each object as
// the DELETE of it a client could have sent instead, and refuses the whole
// request when any of them may not be deleted.
//
// Refusing, rather than narrowing the request to the objects that may go:
// kube-apiserver's success says that every matching object is gone, and a
// caller that gets it (a controller's DeleteAllOf) relies on that. A
// narrowed request would answer success for a delete that did not happen.

package intercept

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/internal/httpx"
)

const (
	// collectionPageSize is the page size of the proxy's list of what a
	// deletecollection would delete.
	collectionPageSize = 500
	// maxNamedChildren bounds the objects a refusal names, in its message
	// and in its causes; the count of the others is given.
	maxNamedChildren = 10
	// maxCollectionWarnings bounds the Warning headers of one answer: a
	// header block has a size limit, and a thousand identical log-mode
	// warnings say no more than ten.
	maxCollectionWarnings = 10
)

// collection is what one deletecollection would delete, each object as
// the DELETE of it.
type collection struct {
	members []*member
	// snapshot is the resourceVersion of the list the members come from.
	snapshot string
	// pin: the caller named no resourceVersion and no continue token, so
	// the forwarded request may be pinned to snapshot.
	pin bool
	// cleanup: the namespace is being deleted.
	cleanup bool
	nsMode  string
	// parents holds one snapshot per controller ownerReference: the
	// objects of one collection share few parents, and each is read (and
	// confirmed live) once.
	parents map[string]parentSnapshot
}

type member struct {
	p *pending
	d decision.Decision
}

type parentSnapshot struct {
	obj    *unstructured.Unstructured
	source string
}

func (i *Interceptor) serveCollection(w http.ResponseWriter, r *http.Request, p *pending, forward http.Handler, writeError ErrorWriter) {
	if p.shadow() {
		i.serveCollectionShadow(w, r, p, forward)
		return
	}
	fail := func(err error) {
		p.outcome = "error"
		i.logError(r, p, err)
		writeError(w, err)
	}
	failOrForward := func(err error) {
		if !i.forwardIgnored(w, r, p, err, forward) {
			fail(err)
		}
	}

	data, err := i.readInterceptedBody(w, r)
	if err != nil {
		fail(err)
		return
	}
	p.data = data
	opts, err := deleteOptionsOf(r, data)
	if err != nil {
		fail(err)
		return
	}
	// kube-apiserver reads the options of a deletecollection from its body
	// when it has one, and from the query only when it has none: a dryRun
	// in the body counts, one in the query next to a body does not. Any
	// value counts, as in classify: one other than All is refused.
	if dry := len(opts.DryRun) > 0; dry != p.w.dryRun {
		wr := *p.w
		wr.dryRun = dry
		p.w = &wr
	}

	c, err := i.gatherCollection(r, p)
	if err != nil {
		failOrForward(err)
		return
	}
	if c.cleanup || len(c.members) == 0 {
		forward.ServeHTTP(w, r)
		return
	}

	var blocked []*member
	for _, m := range c.members {
		c.recall(m.p)
		d, err := i.decideConfirmed(r, m.p, forward)
		if err != nil {
			failOrForward(err)
			return
		}
		m.d = d
		c.remember(m.p)
		if d.Result == decision.Deny {
			blocked = append(blocked, m)
		}
	}
	if len(blocked) > 0 {
		i.refuseCollection(w, r, p, c, blocked, writeError)
		return
	}

	out := c.request(r, data)
	reserved, proceed := i.reserveCollection(w, r, p, c, out, forward, writeError)
	if !proceed {
		return
	}
	addCollectionWarnings(w, c, p.w.dryRun)

	// As for one write, each reserved approval is settled by the answer,
	// or by what is still stored when the answer does not say.
	settle := func(code int) {
		for _, rw := range reserved {
			i.settleReservation(rw, code)
		}
	}
	rec := httpx.NewCodeRecorder(w)
	rec.BeforeHeader = settle
	forward.ServeHTTP(rec, out)
	code := rec.Code()
	if code == 0 {
		settle(0)
	}
	succeeded := code >= 200 && code < 300
	var parentWrites []decision.SideWrite
	for _, m := range c.members {
		m.p.outcome = "forwarded:" + strconv.Itoa(code)
		if succeeded && !p.w.dryRun {
			parentWrites = append(parentWrites, m.d.ParentWrites...)
			i.report(r, m.p, &m.d)
		}
		i.recordDecision(m.p, &m.d)
	}
	i.sideWrites(distinctSideWrites(parentWrites))
}

// gatherCollection lists what the deletecollection would delete, with the
// proxy's credentials and the request's selectors, and gathers for each
// object the facts a DELETE of it has: the stored object (as listed), its
// parent and the namespace's mode.
func (i *Interceptor) gatherCollection(r *http.Request, p *pending) (*collection, error) {
	ctx := r.Context()
	wr := p.w
	kind, err := i.cfg.Objects.KindFor(wr.gvr)
	if meta.IsNoMatchError(err) {
		return nil, resourceNotFound()
	}
	if err != nil {
		return nil, i.unresolvable(fmt.Errorf("resolving the kind of %s: %w", wr.gvr, err))
	}
	m, err := i.cfg.Objects.Mapping(kind)
	if err != nil {
		return nil, i.unresolvable(fmt.Errorf("resolving the resource of %s: %w", kind, err))
	}
	if m.Resource != wr.gvr {
		return nil, resourceNotFound()
	}
	p.kind = kind
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		p.namespace = ""
	}

	c := &collection{parents: map[string]parentSnapshot{}}
	var ri dynamic.ResourceInterface = i.cfg.Writer.Resource(wr.gvr)
	if ns := p.namespace; ns != "" {
		ri = i.cfg.Writer.Resource(wr.gvr).Namespace(ns)
		nsObj, _, err := i.cfg.Objects.GetShared(ctx, namespacesGVR, "", ns)
		switch {
		case err == nil && nsObj.GetDeletionTimestamp() != nil:
			// The namespace controller empties a namespace being deleted
			// with deletecollection, parents included. Holding it would
			// keep the namespace terminating for as long as a freeze
			// stands; deleting the namespace was the decision.
			c.cleanup = true
			return c, nil
		case err == nil:
			c.nsMode = nsObj.GetAnnotations()[annotations.Mode]
		case apierrors.IsNotFound(err):
		default:
			return nil, i.unresolvable(fmt.Errorf("reading the namespace %s: %w", ns, err))
		}
	}

	opts, err := collectionListOptions(r.URL.Query())
	if err != nil {
		return nil, err
	}
	c.pin = opts.ResourceVersion == "" && opts.ResourceVersionMatch == "" && opts.Continue == ""
	// A caller's limit makes kube-apiserver delete one page only.
	onePage := opts.Limit > 0
	if !onePage {
		opts.Limit = collectionPageSize
	}
	for first := true; ; first = false {
		list, err := ri.List(ctx, opts)
		var status apierrors.APIStatus
		if errors.As(err, &status) && (status.Status().Code == http.StatusBadRequest || status.Status().Code == http.StatusUnprocessableEntity) {
			// A selector kube-apiserver cannot parse: it refuses the
			// deletecollection with the same answer.
			return nil, err
		}
		if err != nil {
			return nil, i.unresolvable(fmt.Errorf("listing the %s the deletecollection would delete: %w", wr.gvr.GroupResource(), err))
		}
		if first {
			c.snapshot = list.GetResourceVersion()
		}
		for k := range list.Items {
			mp, err := i.collectionMember(r, p, c, &list.Items[k])
			if err != nil {
				return nil, err
			}
			c.members = append(c.members, &member{p: mp})
		}
		if onePage || list.GetContinue() == "" {
			return c, nil
		}
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = list.GetContinue(), "", ""
	}
}

// collectionMember is the pending DELETE of obj: the same facts, and so the
// same decision input, a DELETE of obj by the same caller would have.
func (i *Interceptor) collectionMember(r *http.Request, p *pending, c *collection, obj *unstructured.Unstructured) (*pending, error) {
	info := *p.w.info
	info.Name = obj.GetName()
	wr := *p.w
	wr.info = &info
	m := &pending{w: &wr, op: decision.Delete, namespace: p.namespace, settings: p.settings, controller: p.controller,
		clock: p.clock, start: p.start, kind: p.kind, old: obj, changed: true, nsMode: c.nsMode,
		policies: i.policyMatcher(r, p)} // one evaluation budget for the whole request
	if c.recall(m) {
		return m, nil
	}
	parent, source, err := i.parentOf(r.Context(), p.namespace, obj, true)
	if err != nil {
		return nil, err
	}
	m.parent, m.parentSource = parent, source
	c.remember(m)
	return m, nil
}

// parentKey names m's controller ownerReference ("" for none).
func parentKey(m *pending) string {
	ref := metav1.GetControllerOfNoCopy(m.old)
	if ref == nil {
		return ""
	}
	return ref.APIVersion + "\x00" + ref.Kind + "\x00" + ref.Name + "\x00" + string(ref.UID)
}

// recall gives m the collection's latest snapshot of its parent, and
// reports whether there was one (or m has no parent).
func (c *collection) recall(m *pending) bool {
	key := parentKey(m)
	if key == "" {
		return true
	}
	s, ok := c.parents[key]
	if ok {
		m.parent, m.parentSource = s.obj, s.source
	}
	return ok
}

// remember keeps m's snapshot of its parent for its siblings: a parent
// confirmed live for one of them is not read again for the next.
func (c *collection) remember(m *pending) {
	if key := parentKey(m); key != "" && m.parent != nil {
		c.parents[key] = parentSnapshot{obj: m.parent, source: m.parentSource}
	}
}

// request is the request to forward: r, pinned to the list the decisions
// were made on when the caller did not name a resourceVersion. Without the
// pin, an object created between the list and the delete would be deleted
// undecided.
func (c *collection) request(r *http.Request, data []byte) *http.Request {
	if !c.pin || c.snapshot == "" {
		return r
	}
	out := r.Clone(r.Context())
	q := out.URL.Query()
	q.Set("resourceVersion", c.snapshot)
	q.Set("resourceVersionMatch", string(metav1.ResourceVersionMatchExact))
	out.URL.RawQuery = q.Encode()
	out.RequestURI = ""
	restoreBody(out, data)
	return out
}

// reserveCollection takes off their parents the once approvals the
// decisions consume, after a dry run of the whole request as the caller
// has shown that kube-apiserver accepts it (as for one write). A conflict
// re-decides that object from a fresh read of its parent. It reports false
// when it has answered the request, and then holds no reservation.
func (i *Interceptor) reserveCollection(w http.ResponseWriter, r *http.Request, p *pending, c *collection, out *http.Request,
	forward http.Handler, writeError ErrorWriter) ([]reservedWrite, bool) {
	if p.w.dryRun {
		return nil, true
	}
	var reserved []reservedWrite
	stop := func(err error) ([]reservedWrite, bool) {
		for _, rw := range reserved {
			i.giveBack(rw, "the deletecollection was not forwarded")
		}
		if err != nil && !i.forwardIgnored(w, r, p, err, forward) {
			p.outcome = "error"
			i.logError(r, p, err)
			writeError(w, err)
		}
		return nil, false
	}
	preflighted := false
	for _, m := range c.members {
		for attempt := 1; ; attempt++ {
			if m.d.Result == decision.Deny {
				stop(nil)
				i.refuseCollection(w, r, p, c, []*member{m}, writeError)
				return nil, false
			}
			upd := m.d.ApprovalsUpdate
			if !m.d.ConsumeOnce || upd == nil {
				break
			}
			if !preflighted {
				if !i.preflight(w, out, forward, writeError) {
					for _, m := range c.members {
						m.p.outcome = "dry-run-refused"
						i.recordDecision(m.p, &m.d)
					}
					return stop(nil)
				}
				preflighted = true
			}
			err := i.reserve(r.Context(), m.p, upd)
			if err == nil {
				reserved = append(reserved, reservedWriteOf(m.p, upd))
				break
			}
			switch decision.OnReservationError(reservationError(err), attempt, maxReservationAttempts) {
			case decision.RefuseRetryable:
				return stop(apierrors.NewConflict(p.w.gvr.GroupResource(), m.p.w.info.Name,
					fmt.Errorf("could not reserve the once approval on %s: the parent kept changing (%v); retry the request", upd.Target, err)))
			case decision.RefuseAsFailure:
				return stop(i.unresolvable(fmt.Errorf("reserving the once approval on %s: %w", upd.Target, err)))
			}
			if err := i.refreshParent(r.Context(), m.p); err != nil {
				return stop(err)
			}
			c.remember(m.p)
			if m.d, err = i.decideConfirmed(r, m.p, forward); err != nil {
				return stop(err)
			}
		}
	}
	return reserved, true
}

// refuseCollection answers 403: the request deletes nothing, and says
// which objects held it back and why.
func (i *Interceptor) refuseCollection(w http.ResponseWriter, r *http.Request, p *pending, c *collection, blocked []*member, writeError ErrorWriter) {
	p.outcome = "denied"
	var warnings []string
	for _, m := range c.members {
		warnings = append(warnings, m.d.Warnings...)
	}
	for _, warning := range boundedWarnings(warnings) {
		w.Header().Add("Warning", formatWarning(warning))
	}
	held := make(map[*member]bool, len(blocked))
	for _, m := range blocked {
		held[m] = true
	}
	for _, m := range c.members {
		m.p.outcome = "denied"
		if !held[m] {
			// Allowed on its own; the request it came in was refused.
			m.p.outcome = "refused-with-collection"
		}
		i.recordDecision(m.p, &m.d)
		if held[m] && !p.w.dryRun {
			i.report(r, m.p, &m.d)
		}
	}
	writeError(w, collectionRefusal(p, len(c.members), blocked))
}

// collectionRefusal is the 403 of a refused deletecollection. It names at
// most maxNamedChildren of the blocked objects, and gives the first one's
// full denial (parent, reason, how to unblock); details.causes carry, for
// each named object, its own causes, each distinct cause once.
func collectionRefusal(p *pending, total int, blocked []*member) *apierrors.StatusError {
	where := ""
	if p.namespace != "" {
		where = " in namespace " + p.namespace
	}
	names := make([]string, 0, min(len(blocked), maxNamedChildren))
	type causeKey struct{ typ, field, msg string }
	seen := map[causeKey]bool{}
	var causes []metav1.StatusCause
	for k, m := range blocked {
		if k == maxNamedChildren {
			break
		}
		names = append(names, m.d.Child.String()+" ("+string(m.d.Category)+")")
		for _, cause := range m.d.Causes {
			key := causeKey{string(cause.Type), cause.Field, cause.Message}
			if !seen[key] {
				seen[key] = true
				causes = append(causes, cause)
			}
		}
	}
	list := strings.Join(names, ", ")
	if more := len(blocked) - len(names); more > 0 {
		list += ", and " + strconv.Itoa(more) + " more"
	}
	msg := fmt.Sprintf("kausality: deletecollection of %s%s denied, nothing was deleted: %d of the %d objects it would delete may not be deleted: %s. %s",
		p.w.gvr.GroupResource(), where, len(blocked), total, list, blocked[0].d.Message)
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: msg,
		Details: &metav1.StatusDetails{Group: p.w.gvr.Group, Kind: p.w.gvr.Resource, Causes: causes},
	}}
}

// addCollectionWarnings adds the decisions' warnings, and for a dry run
// each object's verdict, within maxCollectionWarnings.
func addCollectionWarnings(w http.ResponseWriter, c *collection, dryRun bool) {
	var warnings []string
	for _, m := range c.members {
		warnings = append(warnings, m.d.Warnings...)
	}
	if dryRun {
		for _, m := range c.members {
			warnings = append(warnings, fmt.Sprintf("kausality dry-run: %s (%s): %s: %s", m.d.Result, m.d.Category, m.d.Child, m.d.Reason))
		}
	}
	for _, warning := range boundedWarnings(warnings) {
		w.Header().Add("Warning", formatWarning(warning))
	}
}

// boundedWarnings drops repeated warnings and keeps the first
// maxCollectionWarnings, saying how many more there were.
func boundedWarnings(warnings []string) []string {
	seen := map[string]bool{}
	var out []string
	more := 0
	for _, warning := range warnings {
		if seen[warning] {
			continue
		}
		seen[warning] = true
		if len(out) == maxCollectionWarnings {
			more++
			continue
		}
		out = append(out, warning)
	}
	if more > 0 {
		out = append(out, "kausality: "+strconv.Itoa(more)+" more warnings about this deletecollection are in the proxy's decision log")
	}
	return out
}

// distinctSideWrites drops repeated parent writes: the children of one
// parent ask for the same pruning, and one write carries it out.
func distinctSideWrites(writes []decision.SideWrite) []decision.SideWrite {
	seen := map[string]bool{}
	var out []decision.SideWrite
	for _, sw := range writes {
		key, err := json.Marshal(struct {
			T decision.ObjectRef
			C decision.AnnotationChanges
			S map[string]string
		}{sw.Target, sw.AnnotationChanges, sw.Seen})
		if err != nil || !seen[string(key)] {
			seen[string(key)] = true
			out = append(out, sw)
		}
	}
	return out
}

// collectionListOptions are the list options of a deletecollection, read
// from its query as kube-apiserver reads them.
func collectionListOptions(q url.Values) (metav1.ListOptions, error) {
	var opts metav1.ListOptions
	if err := scheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, &opts); err != nil {
		return opts, apierrors.NewBadRequest(err.Error())
	}
	// Only what selects objects; a deletecollection never watches.
	return metav1.ListOptions{
		LabelSelector:        opts.LabelSelector,
		FieldSelector:        opts.FieldSelector,
		ResourceVersion:      opts.ResourceVersion,
		ResourceVersionMatch: opts.ResourceVersionMatch,
		Limit:                opts.Limit,
		Continue:             opts.Continue,
	}, nil
}

// deleteOptionsOf are the DeleteOptions of a delete or deletecollection,
// decoded as kube-apiserver decodes them: from the body when there is one,
// else from the query.
func deleteOptionsOf(r *http.Request, data []byte) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	if len(data) == 0 {
		if err := scheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return opts, nil
	}
	mediaType := "application/json"
	if ct := r.Header.Get("Content-Type"); ct != "" {
		var err error
		if mediaType, _, err = mime.ParseMediaType(ct); err != nil {
			return nil, unsupportedDeleteOptions(ct)
		}
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		return nil, unsupportedDeleteOptions(mediaType)
	}
	defaultGVK := metav1.SchemeGroupVersion.WithKind("DeleteOptions")
	obj, _, err := scheme.Codecs.DecoderToVersion(info.Serializer, metav1.SchemeGroupVersion).Decode(data, &defaultGVK, opts)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if obj != opts {
		return nil, apierrors.NewBadRequest("decoded object cannot be converted to DeleteOptions")
	}
	return opts, nil
}

// serveCollectionShadow decides a shadow controller's deletecollection
// and logs each object's decision; the request goes upstream exactly as it
// came. Whatever goes wrong while deciding is logged, never returned.
func (i *Interceptor) serveCollectionShadow(w http.ResponseWriter, r *http.Request, p *pending, forward http.Handler) {
	p.outcome = "shadow"
	data, ok := i.readShadowBody(w, r, p, forward)
	if !ok {
		return
	}
	c, err := i.shadowCollection(r, p, data, forward)
	restoreBody(r, data)
	rec := httpx.NewCodeRecorder(w)
	forward.ServeHTTP(rec, r)
	p.outcome = "shadow:" + strconv.Itoa(rec.Code())
	if err != nil {
		i.logError(r, p, err)
		return
	}
	for _, m := range c.members {
		m.p.outcome = p.outcome
		i.recordDecision(m.p, &m.d)
	}
}

// shadowCollection decides every object of a shadow deletecollection. A
// panic is recovered: nothing may keep the request from being forwarded.
func (i *Interceptor) shadowCollection(r *http.Request, p *pending, data []byte, forward http.Handler) (c *collection, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			i.cfg.Log.Error("panic while deciding a shadow deletecollection", zap.Any("panic", rec), zap.Stack("stack"))
			c, err = nil, fmt.Errorf("panic while deciding: %v", rec)
		}
	}()
	p.data = data
	if c, err = i.gatherCollection(r, p); err != nil {
		return nil, err
	}
	if c.cleanup {
		c.members = nil
	}
	for _, m := range c.members {
		c.recall(m.p)
		if m.d, err = i.decideConfirmed(r, m.p, forward); err != nil {
			var refused *refusedByServer
			if !errors.As(err, &refused) {
				return nil, err
			}
		}
		c.remember(m.p)
	}
	return c, nil
}

func unsupportedDeleteOptions(mediaType string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of a deletecollection must be DeleteOptions in JSON, YAML or protobuf; got Content-Type %q", mediaType),
	}}
}
