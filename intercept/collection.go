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
// first decision.MaxNamedChildren of the objects that held it.

package intercept

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

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

// collectionPageSize is the page size of the proxy's list of what a
// deletecollection would delete.
const collectionPageSize = 500

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
	// deleteOptions are the request's options, every DELETE's.
	deleteOptions *metav1.DeleteOptions
	// members are the decided objects, in the order listed, and combined
	// their decisions combined: the verdict, the answer's warnings.
	members  []member
	combined decision.Collection
	// snapshot is the resourceVersion of the list the members come from.
	snapshot string
	// pin: the caller's own list options leave the forwarded request free
	// to list something newer than snapshot, so it may be pinned to it: no
	// continue token (a continued list is the token's snapshot) and no
	// exact resourceVersion. Without it, each listed name is read again
	// and decided as it is now, which is what kube-apiserver deletes.
	pin bool
	// callerVersion: the caller named a resourceVersion. Without a body,
	// kube-apiserver makes it every delete's precondition, which already
	// keeps an object created or changed after the list from being
	// deleted.
	callerVersion bool
	// cleanup: the namespace is being deleted.
	cleanup bool
	// nsModes: see facts.
	nsModes map[string]string
	// whole: a decision may read more of an object than its metadata
	// (the caller's approval policies see oldObject), so it is listed
	// whole.
	whole bool
	// parents holds one snapshot per controller ownerReference: the
	// objects of one collection share few parents, and each is read (and
	// confirmed live) once.
	parents sharedParents
}

// member is one decided object of a deletecollection.
type member struct {
	f facts
	d decision.Decision
}

// add keeps what the rest of the request needs of a decided member.
func (c *collection) add(m member) {
	c.combined.Add(&m.d)
	if !m.d.ConsumeOnce && m.d.Report != decision.ReportDetected {
		// Decided, and neither re-decided on a reservation conflict nor
		// reported: the listed object is no longer needed.
		m.f.old = nil
	}
	c.members = append(c.members, m)
}

// decideCollection lists what the deletecollection whose own facts f
// holds would delete, and has decide.go decide each object as the DELETE
// of it, once. In shadow mode, an object kube-apiserver would refuse to
// delete is kept with its unconfirmed decision, to be logged.
func (i *Interceptor) decideCollection(r *http.Request, f facts, up upstream.Port, shadow bool) (*collection, error) {
	rq := f.req
	c := &collection{req: rq, namespace: f.namespace, kind: f.kind, dryRun: f.dryRun, deleteOptions: f.deleteOptions, parents: sharedParents{}}
	c.combined.DryRun = c.dryRun
	if rq.user != nil && i.cfg.Policies != nil {
		c.whole = len(i.cfg.Policies.For(rq.user.GetName())) > 0
	}
	if err := i.readCollectionNamespace(r.Context(), c); err != nil || c.cleanup {
		return c, err
	}
	err := i.listCollection(r, c, func(obj *unstructured.Unstructured) error {
		of := c.memberFacts(obj)
		mf, d, err := i.decideMember(r, &of, c.parents, up)
		var refused *upstream.RefusedError
		if shadow && errors.As(err, &refused) {
			err = nil
		}
		if err != nil {
			return err
		}
		c.add(member{f: *mf, d: d})
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
		c.nsModes = annotations.ModesOf(nsObj.GetAnnotations())
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
	c.pin = opts.Continue == "" && opts.ResourceVersionMatch != metav1.ResourceVersionMatchExact
	c.callerVersion = opts.ResourceVersion != ""
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
			if !c.pin {
				// kube-apiserver lists at the caller's version, which may
				// be long past, and deletes each name listed as it is now:
				// that object is decided, not the one listed.
				current, err := i.currentMember(r.Context(), c, obj.GetName())
				if apierrors.IsNotFound(err) {
					continue // nothing to delete under that name now
				}
				if err != nil {
					return i.unresolvable(fmt.Errorf("reading %s %s, which the deletecollection would delete: %w", c.kind.Kind, obj.GetName(), err))
				}
				obj = current
			}
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
		obj, err := memberOfMetadata(c, &list.Items[k])
		if err != nil {
			return nil, err
		}
		page.items[k] = obj
	}
	return page, nil
}

// memberOfMetadata is the member of c whose metadata kube-apiserver gave
// as item.
func memberOfMetadata(c *collection, item *metav1.PartialObjectMetadata) (*unstructured.Unstructured, error) {
	// Field owners say nothing about a delete, and are often the larger
	// part of an object's metadata.
	item.ManagedFields = nil
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(item)
	if err != nil {
		return nil, fmt.Errorf("converting the metadata of %s: %w", item.Name, err)
	}
	obj := &unstructured.Unstructured{Object: content}
	obj.SetGroupVersionKind(c.kind)
	return obj, nil
}

// currentMember reads the object named name of c's kind as it is now,
// as the collection is listed: as metadata, or whole when a decision may
// read more.
func (i *Interceptor) currentMember(ctx context.Context, c *collection, name string) (*unstructured.Unstructured, error) {
	gvr, ns := c.req.w.gvr, c.namespace
	if c.whole || i.cfg.Metadata == nil {
		var ri dynamic.ResourceInterface = i.cfg.Writer.Resource(gvr)
		if ns != "" {
			ri = i.cfg.Writer.Resource(gvr).Namespace(ns)
		}
		return ri.Get(ctx, name, metav1.GetOptions{})
	}
	var ri metadata.ResourceInterface = i.cfg.Metadata.Resource(gvr)
	if ns != "" {
		ri = i.cfg.Metadata.Resource(gvr).Namespace(ns)
	}
	item, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return memberOfMetadata(c, item)
}

// memberFacts are the facts of the DELETE of obj: the same facts, and so
// the same decision input, a DELETE of obj by the same caller would have;
// its parent is read with its decision.
func (c *collection) memberFacts(obj *unstructured.Unstructured) facts {
	info := *c.req.w.info
	info.Name = obj.GetName()
	wr := *c.req.w
	wr.info = &info
	rq := *c.req // one evaluation budget of the policies for the whole request
	rq.w = &wr
	return facts{req: &rq, dryRun: c.dryRun, op: decision.Delete, namespace: c.namespace, kind: c.kind, old: obj, listed: true, deleteOptions: c.deleteOptions, changed: true, nsModes: c.nsModes}
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
