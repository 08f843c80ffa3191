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
//
// Bounded: a collection may be larger than the proxy's memory. It is
// listed a page at a time, as metadata unless a decision reads more, each
// object decided as it comes. What is kept of each object is its decision
// (for the decision log once the answer is known), with its metadata only
// while its DriftReport or a once approval needs them; a refusal names the
// first maxNamedChildren of the objects that held it.

package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
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
// the DELETE of it, decided as it is listed. Its memory grows with the
// number of objects by a small record each, never with their size: the
// proxy lists a page at a time, as metadata unless a decision reads more,
// and keeps an object only while a decision or its DriftReport needs it.
type collection struct {
	// members are the decided objects, in the order listed.
	members []*member
	// blocked are the first maxNamedChildren denied members, and denied
	// is how many there are in all.
	blocked []*member
	denied  int
	// warnings are the decisions' warnings, and verdicts each object's
	// verdict for a dry run's answer.
	warnings, verdicts boundedList
	// snapshot is the resourceVersion of the list the members come from.
	snapshot string
	// pin: the caller named no resourceVersion and no continue token, so
	// the forwarded request may be pinned to snapshot.
	pin bool
	// cleanup: the namespace is being deleted.
	cleanup bool
	nsMode  string
	// whole: a decision may read more of an object than its metadata
	// (the caller's approval policies see oldObject), so it is listed
	// whole.
	whole bool
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

// add keeps what the rest of the request needs of a decided member.
func (c *collection) add(m *member, dryRun bool) {
	c.members = append(c.members, m)
	if m.d.Result == decision.Deny {
		c.denied++
		if len(c.blocked) < maxNamedChildren {
			c.blocked = append(c.blocked, m)
		}
	}
	c.warnings.add(m.d.Warnings...)
	if dryRun {
		c.verdicts.add(fmt.Sprintf("kausality dry-run: %s (%s): %s: %s", m.d.Result, m.d.Category, m.d.Child, m.d.Reason))
	}
	if !m.d.ConsumeOnce && m.d.Report != decision.ReportDetected {
		// Decided, and neither re-decided on a reservation conflict nor
		// reported: the listed object is no longer needed.
		m.p.old = nil
	}
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

	c, err := i.openCollection(r, p)
	if err != nil {
		failOrForward(err)
		return
	}
	if c.cleanup {
		forward.ServeHTTP(w, r)
		return
	}
	err = i.listCollection(r, p, c, func(obj *unstructured.Unstructured) error {
		mp, err := i.collectionMember(r, p, c, obj)
		if err != nil {
			return err
		}
		d, err := i.decideConfirmed(r, mp, forward)
		if err != nil {
			return err
		}
		c.remember(mp)
		c.add(&member{p: mp, d: d}, p.w.dryRun)
		return nil
	})
	if err != nil {
		failOrForward(err)
		return
	}
	if c.denied > 0 {
		i.refuseCollection(w, r, p, c, c.blocked, c.denied, writeError)
		return
	}

	out, err := c.request(r, data)
	if err != nil {
		fail(err)
		return
	}
	reserved, proceed := i.reserveCollection(w, r, p, c, out, forward, writeError)
	if !proceed {
		return
	}
	addCollectionWarnings(w, c)

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

// openCollection resolves what the deletecollection deletes and gathers
// the facts all its objects share: their kind and the namespace's mode.
func (i *Interceptor) openCollection(r *http.Request, p *pending) (*collection, error) {
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
	if u, ok := request.UserFrom(ctx); ok && i.cfg.Policies != nil {
		c.whole = len(i.cfg.Policies.For(u.GetName())) > 0
	}
	if ns := p.namespace; ns != "" {
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
	return c, nil
}

// listCollection lists what the deletecollection would delete, with the
// proxy's credentials and the request's selectors, a page at a time, and
// hands each object to each as it comes. Nothing of a page is kept past
// it but what each keeps.
func (i *Interceptor) listCollection(r *http.Request, p *pending, c *collection, each func(*unstructured.Unstructured) error) error {
	opts, err := collectionListOptions(r.URL.Query())
	if err != nil {
		return err
	}
	c.pin = opts.ResourceVersion == "" && opts.ResourceVersionMatch == "" && opts.Continue == ""
	// A caller's limit makes kube-apiserver delete one page only.
	onePage := opts.Limit > 0
	if !onePage {
		opts.Limit = collectionPageSize
	}
	for first := true; ; first = false {
		page, err := i.listPage(r.Context(), p, c, opts)
		var status apierrors.APIStatus
		if errors.As(err, &status) && (status.Status().Code == http.StatusBadRequest || status.Status().Code == http.StatusUnprocessableEntity) {
			// A selector kube-apiserver cannot parse: it refuses the
			// deletecollection with the same answer.
			return err
		}
		if err != nil {
			return i.unresolvable(fmt.Errorf("listing the %s the deletecollection would delete: %w", p.w.gvr.GroupResource(), err))
		}
		if first {
			c.snapshot = page.resourceVersion
		}
		for k, obj := range page.items {
			page.items[k] = nil
			if err := each(obj); err != nil {
				return err
			}
		}
		if onePage || page.next == "" {
			return nil
		}
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = page.next, "", ""
	}
}

// listedPage is one page of the proxy's list of a collection.
type listedPage struct {
	items           []*unstructured.Unstructured
	resourceVersion string
	next            string
}

// listPage lists one page: as metadata (PartialObjectMetadata, of the
// collection's kind), or whole when a decision may read more.
func (i *Interceptor) listPage(ctx context.Context, p *pending, c *collection, opts metav1.ListOptions) (*listedPage, error) {
	gvr, ns := p.w.gvr, p.namespace
	if c.whole || i.cfg.Metadata == nil {
		var ri dynamic.ResourceInterface = i.cfg.Writer.Resource(gvr)
		if ns != "" {
			ri = i.cfg.Writer.Resource(gvr).Namespace(ns)
		}
		list, err := ri.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		page := &listedPage{items: make([]*unstructured.Unstructured, len(list.Items)),
			resourceVersion: list.GetResourceVersion(), next: list.GetContinue()}
		for k := range list.Items {
			// A copy, so that an object kept for its DriftReport does not
			// keep the whole page.
			item := list.Items[k]
			page.items[k] = &item
		}
		return page, nil
	}
	var ri metadata.ResourceInterface = i.cfg.Metadata.Resource(gvr)
	if ns != "" {
		ri = i.cfg.Metadata.Resource(gvr).Namespace(ns)
	}
	list, err := ri.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	page := &listedPage{items: make([]*unstructured.Unstructured, len(list.Items)),
		resourceVersion: list.ResourceVersion, next: list.Continue}
	for k := range list.Items {
		item := &list.Items[k]
		// Field owners say nothing about a delete, and are often the
		// larger part of an object's metadata.
		item.ManagedFields = nil
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(item)
		if err != nil {
			return nil, fmt.Errorf("converting the metadata of %s: %w", item.Name, err)
		}
		obj := &unstructured.Unstructured{Object: content}
		obj.SetGroupVersionKind(p.kind)
		page.items[k] = obj
	}
	return page, nil
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
// undecided. kube-apiserver reads a body-less deletecollection's options
// from its query, resourceVersion included, and would make the pin every
// delete's precondition (a 409 for each object changed since it was
// created); the caller's options go in a body instead, where the pin
// only selects what is deleted.
func (c *collection) request(r *http.Request, data []byte) (*http.Request, error) {
	if !c.pin || c.snapshot == "" {
		return r, nil
	}
	out := r.Clone(r.Context())
	if len(data) == 0 {
		opts, err := deleteOptionsOf(r, nil)
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
	restoreBody(out, data)
	return out, nil
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
				i.refuseCollection(w, r, p, c, []*member{m}, 1, writeError)
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
// which objects held it back (blocked, the first of denied) and why.
func (i *Interceptor) refuseCollection(w http.ResponseWriter, r *http.Request, p *pending, c *collection, blocked []*member, denied int, writeError ErrorWriter) {
	p.outcome = "denied"
	for _, warning := range c.warnings.lines() {
		w.Header().Add("Warning", formatWarning(warning))
	}
	for _, m := range c.members {
		held := m.d.Result == decision.Deny
		m.p.outcome = "denied"
		if !held {
			// Allowed on its own; the request it came in was refused.
			m.p.outcome = "refused-with-collection"
		}
		i.recordDecision(m.p, &m.d)
		if held && !p.w.dryRun {
			i.report(r, m.p, &m.d)
		}
	}
	writeError(w, collectionRefusal(p, len(c.members), blocked, denied))
}

// collectionRefusal is the 403 of a refused deletecollection. It names at
// most maxNamedChildren of the blocked objects, and gives the first one's
// full denial (parent, reason, how to unblock); details.causes carry, for
// each named object, its own causes, each distinct cause once.
func collectionRefusal(p *pending, total int, blocked []*member, denied int) *apierrors.StatusError {
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
	if more := denied - len(names); more > 0 {
		list += ", and " + strconv.Itoa(more) + " more"
	}
	msg := fmt.Sprintf("kausality: deletecollection of %s%s denied, nothing was deleted: %d of the %d objects it would delete may not be deleted: %s. %s",
		p.w.gvr.GroupResource(), where, denied, total, list, blocked[0].d.Message)
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
func addCollectionWarnings(w http.ResponseWriter, c *collection) {
	var all boundedList
	all.add(c.warnings.kept...)
	all.add(c.verdicts.kept...)
	all.more += c.warnings.more + c.verdicts.more
	for _, warning := range all.lines() {
		w.Header().Add("Warning", formatWarning(warning))
	}
}

// boundedList keeps the first maxCollectionWarnings distinct warnings and
// counts the others: a header block has a size limit, and a thousand
// identical log-mode warnings say no more than ten.
type boundedList struct {
	kept []string
	more int
}

func (b *boundedList) add(warnings ...string) {
	for _, warning := range warnings {
		switch {
		case slices.Contains(b.kept, warning):
		case len(b.kept) < maxCollectionWarnings:
			b.kept = append(b.kept, warning)
		default:
			b.more++
		}
	}
}

// lines are the kept warnings, and one that says how many more there were.
func (b *boundedList) lines() []string {
	if b.more == 0 {
		return b.kept
	}
	return append(slices.Clone(b.kept), "kausality: "+strconv.Itoa(b.more)+" more warnings about this deletecollection are in the proxy's decision log")
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
	if mediaType == runtime.ContentTypeCBOR {
		// kube-apiserver's DeleteOptions codecs have no CBOR; the proxy's
		// own decoder reads it, as for any other body.
		obj, _, err := body.DecodeOfKind(mediaType, data, schema.GroupVersionKind{Version: "v1", Kind: "DeleteOptions"})
		if err != nil {
			return nil, err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, opts); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the CBOR body is not DeleteOptions: %v", err))
		}
		return opts, nil
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
	if c, err = i.openCollection(r, p); err != nil || c.cleanup {
		return c, err
	}
	err = i.listCollection(r, p, c, func(obj *unstructured.Unstructured) error {
		mp, err := i.collectionMember(r, p, c, obj)
		if err != nil {
			return err
		}
		d, err := i.decideConfirmed(r, mp, forward)
		var refused *refusedByServer
		if err != nil && !errors.As(err, &refused) {
			return err
		}
		c.remember(mp)
		c.add(&member{p: mp, d: d}, false)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func unsupportedDeleteOptions(mediaType string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of a deletecollection must be DeleteOptions in JSON, YAML, protobuf or CBOR; got Content-Type %q", mediaType),
	}}
}
