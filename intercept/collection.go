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
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
)

const (
	// collectionPageSize is the page size of the proxy's list of what a
	// deletecollection would delete.
	collectionPageSize = 500
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
	req *writeRequest
	// namespace and kind are the objects'.
	namespace string
	kind      schema.GroupVersionKind
	dryRun    bool
	// members are the decided objects, in the order listed, and verdict
	// their verdicts combined.
	members []member
	verdict decision.CollectionVerdict
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
	// nsAllowanceMode is the namespace's kausality.io/allowance-mode.
	nsAllowanceMode string
	// whole: a decision may read more of an object than its metadata
	// (the caller's approval policies see oldObject), so it is listed
	// whole.
	whole bool
	// parents holds one snapshot per controller ownerReference: the
	// objects of one collection share few parents, and each is read (and
	// confirmed live) once.
	parents map[string]parentFacts
}

// member is one decided object of a deletecollection.
type member struct {
	f facts
	d decision.Decision
}

// add keeps what the rest of the request needs of a decided member.
func (c *collection) add(m member) {
	c.verdict.Add(len(c.members), &m.d)
	c.warnings.add(m.d.Warnings...)
	if c.dryRun {
		c.verdicts.add(fmt.Sprintf("kausality dry-run: %s (%s): %s: %s", m.d.Result, m.d.Category, m.d.Child, m.d.Reason))
	}
	if !m.d.ConsumeOnce && m.d.Report != decision.ReportDetected {
		// Decided, and neither re-decided on a reservation conflict nor
		// reported: the listed object is no longer needed.
		m.f.old = nil
	}
	c.members = append(c.members, m)
}

// decideCollection lists what the deletecollection r would delete, and
// decides each object with decide as the DELETE of it.
func (i *Interceptor) decideCollection(r *http.Request, rq *writeRequest, data []byte, decide func(facts) (member, error)) (*collection, error) {
	opts, err := upstream.DeleteOptionsOf(r, data)
	if err != nil {
		return nil, err
	}
	kind, namespace, err := i.resolveKind(rq.w)
	if err != nil {
		return nil, err
	}
	// kube-apiserver reads the options of a deletecollection from its body
	// when it has one, and from the query only when it has none: a dryRun
	// in the body counts, one in the query next to a body does not. Any
	// value counts, as in classify: one other than All is refused.
	c := &collection{req: rq, namespace: namespace, kind: kind, dryRun: len(opts.DryRun) > 0, parents: map[string]parentFacts{}}
	if rq.user != nil && i.cfg.Policies != nil {
		c.whole = len(i.cfg.Policies.For(rq.user.GetName())) > 0
	}
	if err := i.readCollectionNamespace(r.Context(), c); err != nil || c.cleanup {
		return c, err
	}
	err = i.listCollection(r, c, func(obj *unstructured.Unstructured) error {
		f, err := i.memberFacts(r.Context(), c, obj)
		if err != nil {
			return err
		}
		m, err := decide(f)
		if err != nil {
			return err
		}
		c.remember(&m.f)
		c.add(m)
		return nil
	})
	return c, err
}

// readCollectionNamespace reads the mode of the collection's namespace,
// and whether it is being deleted.
func (i *Interceptor) readCollectionNamespace(ctx context.Context, c *collection) error {
	ns := c.namespace
	if ns == "" {
		return nil
	}
	nsObj, _, err := i.cfg.Objects.GetShared(ctx, namespacesGVR, "", ns)
	switch {
	case err == nil && nsObj.GetDeletionTimestamp() != nil:
		// The namespace controller empties a namespace being deleted
		// with deletecollection, parents included. Holding it would
		// keep the namespace terminating for as long as a freeze
		// stands; deleting the namespace was the decision.
		c.cleanup = true
	case err == nil:
		c.nsMode = nsObj.GetAnnotations()[annotations.Mode]
		c.nsAllowanceMode = nsObj.GetAnnotations()[annotations.AllowanceMode]
	case apierrors.IsNotFound(err):
	default:
		return i.unresolvable(fmt.Errorf("reading the namespace %s: %w", ns, err))
	}
	return nil
}

// listCollection lists what the deletecollection would delete, with the
// proxy's credentials and the request's selectors, a page at a time, and
// hands each object to each as it comes. Nothing of a page is kept past
// it but what each keeps.
func (i *Interceptor) listCollection(r *http.Request, c *collection, each func(*unstructured.Unstructured) error) error {
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
		page, err := i.listPage(r.Context(), c, opts)
		var status apierrors.APIStatus
		if errors.As(err, &status) && (status.Status().Code == http.StatusBadRequest || status.Status().Code == http.StatusUnprocessableEntity) {
			// A selector kube-apiserver cannot parse: it refuses the
			// deletecollection with the same answer.
			return err
		}
		if err != nil {
			return i.unresolvable(fmt.Errorf("listing the %s the deletecollection would delete: %w", c.req.w.gvr.GroupResource(), err))
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
func (i *Interceptor) listPage(ctx context.Context, c *collection, opts metav1.ListOptions) (*listedPage, error) {
	gvr, ns := c.req.w.gvr, c.namespace
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
		obj.SetGroupVersionKind(c.kind)
		page.items[k] = obj
	}
	return page, nil
}

// memberFacts are the facts of the DELETE of obj: the same facts, and so
// the same decision input, a DELETE of obj by the same caller would have.
func (i *Interceptor) memberFacts(ctx context.Context, c *collection, obj *unstructured.Unstructured) (facts, error) {
	info := *c.req.w.info
	info.Name = obj.GetName()
	wr := *c.req.w
	wr.info = &info
	rq := *c.req // one evaluation budget of the policies for the whole request
	rq.w = &wr
	f := facts{req: &rq, dryRun: c.dryRun, op: decision.Delete, namespace: c.namespace, kind: c.kind, old: obj, changed: true, nsMode: c.nsMode, nsAllowanceMode: c.nsAllowanceMode}
	if parent, ok := c.recall(&f); ok {
		f.parent = parent
		return f, nil
	}
	parent, source, err := i.parentOf(ctx, c.namespace, obj, true)
	if err != nil {
		return f, err
	}
	f.parent = i.parentFactsOf(ctx, &f, parent, source)
	c.remember(&f)
	return f, nil
}

// parentKey names the controller ownerReference of f's object ("" for
// none).
func parentKey(f *facts) string {
	if f.old == nil {
		return ""
	}
	ref := metav1.GetControllerOfNoCopy(f.old)
	if ref == nil {
		return ""
	}
	return ref.APIVersion + "\x00" + ref.Kind + "\x00" + ref.Name + "\x00" + string(ref.UID)
}

// recall is the collection's latest snapshot of f's parent; ok also when
// f has no parent.
func (c *collection) recall(f *facts) (parentFacts, bool) {
	key := parentKey(f)
	if key == "" {
		return parentFacts{}, true
	}
	s, ok := c.parents[key]
	return s, ok
}

// remember keeps f's snapshot of its parent for its siblings: a parent
// confirmed live for one of them is not read again for the next.
func (c *collection) remember(f *facts) {
	if key := parentKey(f); key != "" && f.parent.obj != nil {
		c.parents[key] = f.parent
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

// collectionRefusal is the 403 of a refused deletecollection. It names at
// most maxNamedChildren of the blocked objects, and gives the first one's
// full denial (parent, reason, how to unblock); details.causes carry, for
// each named object, its own causes, each distinct cause once.
func collectionRefusal(f *facts, c *collection, verdict decision.CollectionVerdict) *apierrors.StatusError {
	wr := f.req.w
	where := ""
	if c.namespace != "" {
		where = " in namespace " + c.namespace
	}
	names := make([]string, 0, len(verdict.Blocked))
	type causeKey struct{ typ, field, msg string }
	seen := map[causeKey]bool{}
	var causes []metav1.StatusCause
	for _, k := range verdict.Blocked {
		d := &c.members[k].d
		names = append(names, d.Child.String()+" ("+string(d.Category)+")")
		for _, cause := range d.Causes {
			key := causeKey{string(cause.Type), cause.Field, cause.Message}
			if !seen[key] {
				seen[key] = true
				causes = append(causes, cause)
			}
		}
	}
	list := strings.Join(names, ", ")
	if more := verdict.Denied - len(names); more > 0 {
		list += ", and " + strconv.Itoa(more) + " more"
	}
	msg := fmt.Sprintf("kausality: deletecollection of %s%s denied, nothing was deleted: %d of the %d objects it would delete may not be deleted: %s. %s",
		wr.gvr.GroupResource(), where, verdict.Denied, len(c.members), list, c.members[verdict.Blocked[0]].d.Message)
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: msg,
		Details: &metav1.StatusDetails{Group: wr.gvr.Group, Kind: wr.gvr.Resource, Causes: causes},
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

// collectionRefused: an object of the deletecollection may not be
// deleted after all (decided again after a reservation conflict).
type collectionRefused struct{ verdict decision.CollectionVerdict }

func (e *collectionRefused) Error() string {
	return "an object of the deletecollection may not be deleted"
}
