// The facts of one write, gathered once into a value that nothing changes
// afterwards: the kind, the stored object, the effective new object, the
// desired-state change, the parent and the namespace. When a decision
// needs more, the loop in decide.go has it fetched here into a new value
// made from the old one: a live read of the object, kube-apiserver's own
// result for the write, a live read of the parent, and whether the caller
// may read them. Those reads are independent, so they run together.

package intercept

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/history"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/intercept/scalepath"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
)

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// facts is what one decision is made on. A value: a round that learns
// more makes a new one.
type facts struct {
	req  *writeRequest
	data []byte
	// dryRun: the query's dryRun, or a delete's options in its body.
	dryRun bool
	// op is the effective operation: an apply or a PUT of an object that
	// does not exist is a create.
	op decision.Operation
	// namespace is the object's: the request's, or "" for cluster-scoped
	// resources.
	namespace string
	kind      schema.GroupVersionKind
	format    body.Format
	patchType types.PatchType
	// force is an apply's force parameter.
	force *bool
	// sent is the object the client sent (creates and updates), or the
	// Scale of a /scale PUT.
	sent     *unstructured.Unstructured
	old, new *unstructured.Unstructured
	changed  bool
	changes  []desired.Change
	// parent is the controller owner of the object after the write;
	// formerParent the one the write moves the child away from.
	parent, formerParent parentFacts
	nsMode               string
	// nsAllowanceMode is the namespace's kausality.io/allowance-mode.
	nsAllowanceMode string
	// warnings are about facts that could not be read but were not needed.
	warnings []string
	// childLive: old was read live.
	childLive bool
	// oldIsMetadata: old is the cached metadata of the stored child, not
	// the whole object (objects.Store caches children so).
	oldIsMetadata bool
	// confirmed: old and new are kube-apiserver's (a live read and a dry
	// run), and precondition is the resourceVersion the write was decided
	// on, which the forwarded write must still find.
	confirmed    bool
	precondition string
	// childAccessKnown: whether the caller may read the object was asked;
	// mayReadChild is the answer.
	childAccessKnown, mayReadChild bool
	// parentAccessKnown: whether the caller may read the parents was
	// asked; their hidden fields are the answer.
	parentAccessKnown bool
}

// parentFacts is a parent snapshot and what is known about it.
type parentFacts struct {
	obj *unstructured.Unstructured
	// source: the cache, a live read, or "gone".
	source string
	// settle: has it settled at its current spec (nil when gone).
	settle *settle.Facts
	// revisions the parent controls, when the write deletes one of them.
	revisions []history.Revision
	hidden    bool
}

// gatherOne reads the body of rq's write of one object from r and gathers
// its facts. On an error, the facts are those known so far.
func (i *Interceptor) gatherOne(w http.ResponseWriter, r *http.Request, rq *writeRequest) (facts, error) {
	f := facts{req: rq, op: rq.w.op, namespace: rq.w.namespace, dryRun: rq.w.dryRun}
	data, err := i.readInterceptedBody(w, r)
	if err != nil {
		return f, err
	}
	bodyDryRun, err := deleteDryRun(r, rq.w, data)
	if err != nil {
		return f, err
	}
	// kube-apiserver reads a delete's options from its body: a dry run
	// there is as much a dry run as one in the query, and must consume
	// nothing.
	return i.gather(r.Context(), rq, data, rq.w.dryRun || bodyDryRun)
}

// gather reads the facts of the write whose body is data.
func (i *Interceptor) gather(ctx context.Context, rq *writeRequest, data []byte, dryRun bool) (facts, error) {
	wr := rq.w
	f := facts{req: rq, data: data, dryRun: dryRun, op: wr.op, namespace: wr.namespace}
	kind, namespace, err := i.resolveKind(wr)
	if err != nil {
		return f, err
	}
	f.kind, f.namespace = kind, namespace
	// A whole object in the body is decoded once, before any read: a body
	// that cannot be decoded costs no I/O, and its resourceVersion tells
	// whether the cache is behind.
	if f.op != decision.Delete && wr.verb != "patch" {
		decodeAs := &f.kind
		if wr.sub == scaleSubresource {
			decodeAs = &scaleKind
		}
		obj, format, err := body.Decode(rq.contentType, data, decodeAs)
		if err != nil {
			return f, err
		}
		f.sent, f.format = obj, format
	}
	if wr.verb == "patch" {
		if f.patchType, err = patch.TypeFor(rq.contentType); err != nil {
			return f, err
		}
		if f.force, err = readForce(rq.w.force); err != nil {
			return f, err
		}
	}
	if f.op != decision.Create {
		stored, err := i.storedObject(ctx, &f, storedNeedOf(&f))
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return f, i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", kind.Kind, qualifiedName(f.namespace, wr.info.Name), err))
		default:
			f.old, f.childLive, f.oldIsMetadata = stored.obj, stored.live, stored.metadataOnly
		}
	}
	if f, err = i.withEffectiveObject(ctx, f); err != nil {
		return f, err
	}
	if f.oldIsMetadata && wr.verb == "patch" && patch.OnlyMetadata(f.patchType, f.data) {
		// A patch of metadata alone changes no desired state, whatever
		// the child holds: its metadata is all the decision reads.
		f.changed, f.changes, f.oldIsMetadata = false, nil, false
	}
	return i.withSurroundings(ctx, f)
}

// resolveKind maps the request's resource to its kind, and the object's
// namespace ("" for cluster-scoped resources).
func (i *Interceptor) resolveKind(wr *write) (schema.GroupVersionKind, string, error) {
	kind, err := i.cfg.Objects.KindFor(wr.gvr)
	if meta.IsNoMatchError(err) {
		return kind, "", resourceNotFound()
	}
	if err != nil {
		return kind, "", i.unresolvable(fmt.Errorf("resolving the kind of %s: %w", wr.gvr, err))
	}
	m, err := i.cfg.Objects.Mapping(kind)
	if err != nil {
		return kind, "", i.unresolvable(fmt.Errorf("resolving the resource of %s: %w", kind, err))
	}
	// Discovery matches resource names in any case; kube-apiserver serves
	// only the canonical spelling. Anything else is not a resource, and
	// must not become a cache of its own.
	if m.Resource != wr.gvr {
		return kind, "", resourceNotFound()
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		return kind, "", nil
	}
	return kind, wr.namespace, nil
}

// withEffectiveObject computes the object the write produces from the
// stored one: the decoded body, the patched stored object, or the scaled
// one; and the desired-state change.
func (i *Interceptor) withEffectiveObject(ctx context.Context, f facts) (facts, error) {
	wr := f.req.w
	var err error
	switch {
	case f.op == decision.Delete:
	case wr.sub == scaleSubresource:
		if f.old == nil {
			return f, apierrors.NewNotFound(wr.gvr.GroupResource(), wr.info.Name)
		}
		if f.new, err = i.scaledObject(ctx, &f); err != nil {
			return f, err
		}
	case wr.verb == "patch" && f.oldIsMetadata && f.patchType != types.MergePatchType && f.patchType != types.StrategicMergePatchType:
		return i.patchedMetadata(ctx, f)
	case wr.verb == "patch":
		if f.new, err = patched(&f); err != nil {
			return f, err
		}
		if f.old == nil {
			f.op = decision.Create // an apply that creates
		}
	default:
		f.new = f.sent
		if f.op == decision.Update && f.old == nil {
			f.op = decision.Create // create-on-update (PUT of a missing object)
		}
		if f.new.GetNamespace() == "" && f.namespace != "" {
			f.new.SetNamespace(f.namespace)
		}
	}
	if wr.sub != statusSubresource {
		f.changed, f.changes = desiredChange(f.op, f.old, f.new)
	}
	return f, nil
}

// patchedMetadata is what a JSON patch or an apply makes of the stored
// child's cached metadata; when that depends on more than the metadata,
// the child is read whole.
func (i *Interceptor) patchedMetadata(ctx context.Context, f facts) (facts, error) {
	ns := f.namespace
	opts := patch.Options{Kind: f.kind, Name: f.req.w.info.Name, Namespace: &ns, SkipTypeCheck: true}
	if view, ok := patch.ApplyToMetadata(f.patchType, f.old, f.data, opts); ok {
		f.new = view.Object
		f.changed, f.changes = desiredChange(f.op, f.old, f.new)
		f.changed = f.changed || view.ChangesContent
		return f, nil
	}
	live, err := i.cfg.Objects.GetLive(ctx, f.req.w.gvr, f.namespace, f.req.w.info.Name)
	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return f, i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", f.kind.Kind, qualifiedName(f.namespace, f.req.w.info.Name), err))
	}
	f.old, f.childLive, f.oldIsMetadata = live, true, false
	return i.withEffectiveObject(ctx, f)
}

// patched applies the request's patch to the stored object.
func patched(f *facts) (*unstructured.Unstructured, error) {
	rq := f.req
	ns := f.namespace
	// kube-apiserver type-checks the patched object itself; skipping our
	// copy of that check saves a third of a patch's cost.
	opts := patch.Options{FieldManager: rq.w.fieldManager, Kind: f.kind, Name: rq.w.info.Name, Namespace: &ns, SkipTypeCheck: true, Force: f.force}
	if f.patchType == types.ApplyYAMLPatchType || f.patchType == types.ApplyCBORPatchType {
		opts.TypeConverter = builtinTC()
	} else if !rq.w.explicitFieldManager {
		opts.FieldManager = ""
	}
	return patch.Apply(f.patchType, f.old, f.data, opts)
}

// readForce reads an apply's force parameter as kube-apiserver does:
// anything but 0, false or no (any case) is true, and the first value
// counts.
func readForce(f []string) (*bool, error) {
	if len(f) == 0 {
		return nil, nil
	}
	var force *bool
	if err := runtime.Convert_Slice_string_To_Pointer_bool(&f, &force, nil); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the force parameter: %v", err))
	}
	return force, nil
}

// withSurroundings reads what the decision needs besides the object: the
// parent (and the one the write moves the child away from) and the
// namespace.
func (i *Interceptor) withSurroundings(ctx context.Context, f facts) (facts, error) {
	// A status write is never gated: it records on the written object
	// itself, and never fails because a parent cannot be read.
	if f.req.w.sub == statusSubresource {
		return f, nil
	}
	// gated: the verdict depends on the parent and the namespace, so a
	// failure to read them follows the failure policy. A write that
	// changes no desired state is allowed whatever they say, so it goes
	// on without them, with a warning.
	gated := f.changed || f.op != decision.Update
	bestEffort := func(err error) (facts, error) {
		if gated {
			return f, err
		}
		f.warnings = append(append([]string(nil), f.warnings...), "kausality: "+err.Error()+"; decided without it (this write changes no desired state)")
		return f, nil
	}

	// The parent: the controller owner of the object after the write (of
	// the stored object for deletes).
	owned := f.new
	if owned == nil {
		owned = f.old
	}
	parent, source, err := i.parentOf(ctx, f.namespace, owned, f.op == decision.Delete)
	if err != nil {
		return bestEffort(err)
	}
	f.parent = i.parentFactsOf(ctx, &f, parent, source)
	// A write that removes or re-points the controller ownerReference is
	// decided against the owner it leaves too: moving a child away from a
	// frozen or settled parent is a write under that parent.
	if f.op == decision.Update && f.old != nil && f.new != nil && decision.ControllerMoved(f.old, f.new) {
		former, source, err := i.parentOf(ctx, f.namespace, f.old, true)
		if err != nil {
			return bestEffort(err)
		}
		if source != "gone" {
			f.formerParent = i.parentFactsOf(ctx, &f, former, source)
		}
	}

	if ns := f.namespace; ns != "" {
		nsObj, _, err := i.cfg.Objects.GetShared(ctx, namespacesGVR, "", ns)
		switch {
		case err == nil:
			f.nsMode = nsObj.GetAnnotations()[annotations.Mode]
			f.nsAllowanceMode = nsObj.GetAnnotations()[annotations.AllowanceMode]
		case apierrors.IsNotFound(err):
			// Writes into a namespace that does not exist fail upstream.
		default:
			// The namespace may say enforce: deciding without it would
			// fail open.
			return bestEffort(i.unresolvable(fmt.Errorf("reading the namespace %s: %w", ns, err)))
		}
	}
	return f, nil
}

// parentFactsOf is what the decision reads of parent: its snapshot, its
// settledness, and the revisions it controls when the write deletes one.
func (i *Interceptor) parentFactsOf(ctx context.Context, f *facts, parent *unstructured.Unstructured, source string) parentFacts {
	pf := parentFacts{obj: parent, source: source}
	if parent == nil {
		return pf
	}
	if source != "gone" {
		assessed := i.settled.Assess(parent)
		pf.settle = &assessed
	}
	pf.revisions = i.ownedRevisions(ctx, f, parent)
	return pf
}

// storedNeed is how much of the stored child a write needs before it is
// decided.
type storedNeed int

const (
	// storedMetadata: the write is decided on the child's metadata, and
	// decided again on the whole child when the verdict depends on more
	// (decision.Needs).
	storedMetadata storedNeed = iota
	// storedWhole: the write's effect is computed from the stored content
	// (a JSON patch addresses its fields, a /scale write reads the
	// replicas, a status write is learned with the stored spec).
	storedWhole
	// storedWithManagedFields: an apply is merged with the stored field
	// ownership, which no cache keeps.
	storedWithManagedFields
	// storedMetadataOnly: as storedMetadata, also for a kind cached whole.
	storedMetadataOnly
)

// storedNeedOf says how much of the stored child the write of f needs.
func storedNeedOf(f *facts) storedNeed {
	wr := f.req.w
	apply := f.patchType == types.ApplyYAMLPatchType || f.patchType == types.ApplyCBORPatchType
	switch {
	case wr.sub != mainResource:
		if wr.verb == "patch" && apply {
			return storedWithManagedFields
		}
		return storedWhole
	case apply:
		// Decided on the metadata first (patch.ApplyToMetadata); the
		// field ownership the merge needs is in no cache, so a whole
		// cached object is no better.
		return storedMetadataOnly
	}
	// A merge patch leaves what it does not name as it is: applied to the
	// metadata it gives the metadata the write stores. A JSON patch is
	// tried on the metadata (patch.ApplyToMetadata). An update or a delete
	// is decided on the metadata, and the whole child read only for a
	// verdict that turns on it.
	return storedMetadata
}

// storedChild is the stored object as read: whether live, and whether only
// its cached metadata.
type storedChild struct {
	obj                *unstructured.Unstructured
	live, metadataOnly bool
}

// storedObject reads the object the write applies to, as much of it as
// need says. An update carries the resourceVersion it was based on (in
// sent); when the cache holds an older one the cache is behind, and a live
// read gives the real stored object.
func (i *Interceptor) storedObject(ctx context.Context, f *facts, need storedNeed) (storedChild, error) {
	wr := f.req.w
	var (
		old    *unstructured.Unstructured
		source objects.Source
		err    error
	)
	switch need {
	case storedWithManagedFields:
		old, err = i.cfg.Objects.GetLive(ctx, wr.gvr, f.namespace, wr.info.Name)
		return storedChild{obj: old, live: true}, err
	case storedWhole:
		old, source, err = i.cfg.Objects.GetWhole(ctx, wr.gvr, f.namespace, wr.info.Name)
	case storedMetadataOnly:
		need = storedMetadata
		if whole, ok := i.cfg.Objects.GetCachedWhole(wr.gvr, f.namespace, wr.info.Name); ok {
			old, source = &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": whole.GetAPIVersion(), "kind": whole.GetKind(), "metadata": whole.Object["metadata"]}}, objects.FromCache
			break
		}
		old, source, err = i.cfg.Objects.GetMetadata(ctx, wr.gvr, f.namespace, wr.info.Name)
	default:
		// A kind that is also a parent is cached whole anyway.
		if whole, ok := i.cfg.Objects.GetCachedWhole(wr.gvr, f.namespace, wr.info.Name); ok {
			old, source, need = whole, objects.FromCache, storedWhole
			break
		}
		old, source, err = i.cfg.Objects.GetMetadata(ctx, wr.gvr, f.namespace, wr.info.Name)
	}
	if err != nil {
		return storedChild{}, err
	}
	if source != objects.FromCache {
		return storedChild{obj: old, live: true}, nil
	}
	if f.sent != nil && wr.verb == "update" && wr.sub != scaleSubresource {
		if rv := f.sent.GetResourceVersion(); rv != "" && rv != old.GetResourceVersion() {
			old, err = i.cfg.Objects.GetLive(ctx, wr.gvr, f.namespace, wr.info.Name)
			return storedChild{obj: old, live: true}, err
		}
	}
	return storedChild{obj: old, metadataOnly: need == storedMetadata}, nil
}

// parentOf reads the controller owner of owned (nil when it has none), and
// where it came from: the cache, a live read, or "gone".
func (i *Interceptor) parentOf(ctx context.Context, namespace string, owned *unstructured.Unstructured, unservedIsGone bool) (*unstructured.Unstructured, string, error) {
	if owned == nil {
		return nil, "", nil
	}
	ref := metav1.GetControllerOfNoCopy(owned)
	if ref == nil {
		return nil, "", nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, "", apierrors.NewBadRequest(fmt.Sprintf("the controller ownerReference has an invalid apiVersion %q: %v", ref.APIVersion, err))
	}
	// The parent snapshot is only read: no copy of the cached object.
	parent, source, err := i.cfg.Objects.GetKindShared(ctx, gv.WithKind(ref.Kind), namespace, ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		// The parent is gone: garbage collection is cleaning up, which is
		// allowed like any write under a deleting parent.
		return goneParent(ref, namespace), "gone", nil
	case unservedIsGone && meta.IsNoMatchError(err):
		// Its kind is not served even after a fresh discovery: removing a
		// CustomResourceDefinition removes every object of its kind, so
		// no such parent exists. Deleting an orphan, or moving a child
		// away from it, is cleanup; a write that keeps the reference is
		// refused with a message that says how to fix it.
		return goneParent(ref, namespace), "gone", nil
	case err != nil:
		return nil, "", i.unresolvable(fmt.Errorf("reading the parent %s %s: %w", ref.Kind, ref.Name, err))
	}
	if ref.UID != "" && parent.GetUID() != ref.UID {
		return goneParent(ref, namespace), "gone", nil
	}
	return parent, string(source), nil
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

// ownedRevisions lists the revisions the parent controls when the write
// deletes one of them: only then can it be history pruning. A list that
// fails leaves the write to be decided as any other delete.
func (i *Interceptor) ownedRevisions(ctx context.Context, f *facts, parent *unstructured.Unstructured) []history.Revision {
	if f.op != decision.Delete || parent == nil || f.old == nil || !history.Kept(parent.GroupVersionKind().GroupKind(), f.kind.GroupKind()) {
		return nil
	}
	objs, err := i.cfg.Objects.Owned(ctx, f.req.w.gvr, f.namespace, parent.GetUID(), history.RevisionInMetadata(f.kind.GroupKind()))
	if err != nil {
		return nil
	}
	revs := make([]history.Revision, 0, len(objs))
	for _, o := range objs {
		if r, ok := history.RevisionOf(o); ok {
			revs = append(revs, r)
		}
	}
	return revs
}

// desiredChange reports whether the write changes the desired state.
func desiredChange(op decision.Operation, old, new *unstructured.Unstructured) (bool, []desired.Change) {
	if op == decision.Delete {
		return true, nil
	}
	return desired.Changed(old, new)
}

func qualifiedName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
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

// Reading the body, the first fact: whole, within the size limit and the
// request's deadline.

// readBody reads at most limit bytes, within the request's deadline: a
// body trickled in a byte at a time must not hold a write (and its memory)
// for longer than any other request may take. When the body is larger than
// limit, the bytes read so far are put back in front of the rest, so the
// request can still be forwarded untouched.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (data []byte, tooLarge bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		upstream.RestoreBody(r, nil)
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
	upstream.RestoreBody(r, data)
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

// evictionGVK is the kind of an eviction's body when it names none.
var evictionGVK = schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}

// deleteDryRun reports whether the options of a delete or an eviction make
// it a dry run. kube-apiserver takes a DELETE's options from its body when
// it has one, and from the query only when it has none; an eviction's come
// from its body (kubectl drain --dry-run=server sends them there) as well
// as from the query. As in classify, any dryRun value counts: a value other
// than "All" is refused by kube-apiserver, so the write changes nothing.
func deleteDryRun(r *http.Request, wr *write, data []byte) (bool, error) {
	switch {
	case r.Method == http.MethodDelete && wr.sub == mainResource:
		opts, err := upstream.DeleteOptionsOf(r, data)
		if err != nil {
			return false, err
		}
		return len(opts.DryRun) > 0, nil
	case len(data) == 0:
		return false, nil
	case wr.sub == evictionSubresource:
		// Decoded as any other body, whatever its format: a dryRun the
		// proxy cannot read would make a dry run consume a once approval.
		eviction, _, err := body.DecodeOfKind(r.Header.Get("Content-Type"), data, evictionGVK)
		if err != nil {
			return false, err
		}
		dryRun, _, err := unstructured.NestedFieldNoCopy(eviction.Object, "deleteOptions", "dryRun")
		if err != nil {
			return false, apierrors.NewBadRequest(fmt.Sprintf("the Eviction's deleteOptions: %v", err))
		}
		values, ok := dryRun.([]any)
		if dryRun != nil && !ok {
			return false, apierrors.NewBadRequest(fmt.Sprintf("the Eviction's deleteOptions.dryRun must be a list of strings, got %s", body.Describe(dryRun)))
		}
		return len(values) > 0, nil
	}
	return false, nil
}

// readInterceptedBody reads the body of a write the proxy decides: the
// whole of it, or a 413 when it is larger than --max-request-body-bytes.
func (i *Interceptor) readInterceptedBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, tooLarge, err := readBody(w, r, i.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	if tooLarge {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the body of this intercepted write exceeds the proxy's limit of %d bytes (--max-request-body-bytes)", i.cfg.MaxBodyBytes))
	}
	return data, nil
}

// readShadowBody reads the body of a shadow controller's write; an error
// when it cannot be read whole.
func (i *Interceptor) readShadowBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, tooLarge, err := readBody(w, r, i.cfg.MaxBodyBytes)
	if err == nil && tooLarge {
		err = fmt.Errorf("body larger than %d bytes: not decided", i.cfg.MaxBodyBytes)
	}
	return data, err
}

var scaleKind = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}

// scaledObject turns a /scale write into the write of the replicas field on
// the scaled object it amounts to (HPA and kubectl scale become spec
// writes). A PATCH applies to the Scale the apiserver would serve for the
// stored object, owners of the replicas field included, so apply conflicts
// match.
func (i *Interceptor) scaledObject(ctx context.Context, f *facts) (*unstructured.Unstructured, error) {
	wr := f.req.w
	path, err := i.specReplicasPath(ctx, wr.gvr)
	if err != nil {
		return nil, err
	}
	scale := f.sent
	if wr.verb == "patch" {
		current, err := desired.ScaleFromTarget(f.old, path)
		if err != nil {
			return nil, err
		}
		ns := f.namespace
		scale, err = patch.Apply(f.patchType, current, f.data, patch.Options{FieldManager: wr.fieldManager, Kind: scaleKind, Name: wr.info.Name, Namespace: &ns})
		if err != nil {
			return nil, err
		}
	}
	return desired.ScaleToPath(scale, f.old, path)
}

// specReplicasPath is where the /scale of gvr writes. A resource without
// a scale subresource is kube-apiserver's 404.
func (i *Interceptor) specReplicasPath(ctx context.Context, gvr schema.GroupVersionResource) (string, error) {
	path, scalable, err := i.scalePaths.SpecReplicasPath(ctx, gvr)
	var unreadable *scalepath.UnreadableError
	switch {
	case errors.As(err, &unreadable):
		return "", i.unresolvable(unreadable.Err)
	case err != nil:
		return "", err
	case !scalable:
		return "", resourceNotFound()
	}
	return path, nil
}

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
func (i *Interceptor) refetch(r *http.Request, f facts, need decision.Need, up upstream.Port) (facts, error) {
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
		f.mayReadChild = f.kind.GroupKind() != (schema.GroupKind{Kind: "Secret"}) && i.access.MayGet(ctx, writeAttributes(f.req.user, f.req.w, "get"), f.req.w.info.Name)
	}
	if need.ParentAccess {
		f.parentAccessKnown = true
		if f.parent.obj != nil {
			f.parent.hidden = !i.access.MayGetParent(ctx, f.req.user, f.parent.obj)
		}
		if f.formerParent.obj != nil {
			f.formerParent.hidden = !i.access.MayGetParent(ctx, f.req.user, f.formerParent.obj)
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
func (i *Interceptor) fetch(r *http.Request, f *facts, need decision.Need, up upstream.Port) (fetched, error) {
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
func (i *Interceptor) afresh(r *http.Request, f facts, up upstream.Port) (facts, error) {
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
func (i *Interceptor) serverResultOf(r *http.Request, f *facts, up upstream.Port) (serverResult, error) {
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
	answer, err := up.DryRun(dry, f.data, maxConfirmAnswer)
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
	if !answer.Succeeded() {
		return serverResult{}, &upstream.RefusedError{Answer: answer}
	}
	if answer.Truncated() {
		return serverResult{}, i.unresolvable(fmt.Errorf("kube-apiserver's dry run of this write answered more than %d bytes", maxConfirmAnswer))
	}
	stored := &unstructured.Unstructured{}
	if err := stored.UnmarshalJSON(answer.Body()); err != nil {
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
