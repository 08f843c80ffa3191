// Gathering the facts of one write, each read once: the kind, the stored
// object, the effective new object, the desired-state change, the parent
// and the namespace; and the decision's input built from them.

package intercept

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/history"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

// load gathers the facts of the write: its kind, the stored object, the
// effective new object, the desired-state change, the parent and the
// namespace.
func (i *Interceptor) load(r *http.Request, p *pending) error {
	ctx := r.Context()
	wr := p.w
	if err := i.resolveKind(p); err != nil {
		return err
	}
	kind := p.kind
	// A whole object in the body is decoded once, before any read: a body
	// that cannot be decoded costs no I/O, and its resourceVersion tells
	// whether the cache is behind.
	var decoded *unstructured.Unstructured
	if p.op != decision.Delete && wr.sub != scaleSubresource && wr.verb != "patch" {
		obj, format, err := body.Decode(r.Header.Get("Content-Type"), p.data, &kind)
		if err != nil {
			return err
		}
		decoded, p.format, p.sent = obj, format, obj
	}

	if p.op != decision.Create {
		old, isMetadata, err := i.storedObject(ctx, wr, p.namespace, decoded, storedNeedOf(r, p))
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", kind.Kind, qualifiedName(p.namespace, wr.info.Name), err))
		default:
			p.old, p.oldIsMetadata = old, isMetadata
		}
	}

	if err := i.effectiveObject(r, p, decoded); err != nil {
		return err
	}
	if wr.sub != statusSubresource {
		p.changed, p.changes = desiredChange(p.op, p.old, p.new)
	}
	if p.oldIsMetadata && wr.verb == "patch" && patch.OnlyMetadata(p.patchTy, p.data) {
		// A patch of metadata alone changes no desired state, whatever
		// the child holds: its metadata is all the decision reads.
		p.changed, p.changes, p.oldIsMetadata = false, nil, false
	}
	return i.readSurroundings(ctx, p)
}

// resolveKind maps the request's resource to its kind and scope.
func (i *Interceptor) resolveKind(p *pending) error {
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
	return nil
}

// effectiveObject computes the object the write produces from the stored
// one: the decoded body, the patched stored object, or the scaled one.
func (i *Interceptor) effectiveObject(r *http.Request, p *pending, decoded *unstructured.Unstructured) error {
	wr := p.w
	var err error
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
		return i.patched(r, p)
	default:
		p.new = decoded
		if p.op == decision.Update && p.old == nil {
			p.op = decision.Create // create-on-update (PUT of a missing object)
		}
		if p.new.GetNamespace() == "" && p.namespace != "" {
			p.new.SetNamespace(p.namespace)
		}
	}
	return nil
}

// patched applies the request's patch to the stored object.
func (i *Interceptor) patched(r *http.Request, p *pending) error {
	wr := p.w
	kind := p.kind
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
	return nil
}

// readSurroundings reads what the decision needs besides the object: the
// parent (and the one the write moves the child away from) and the
// namespace.
func (i *Interceptor) readSurroundings(ctx context.Context, p *pending) error {
	wr := p.w
	// A status write is never gated: it records on the written object
	// itself, and never fails because a parent cannot be read.
	if wr.sub == statusSubresource {
		return nil
	}
	// gated: the verdict depends on the parent and the namespace, so a
	// failure to read them follows the failure policy. A write that
	// changes no desired state is allowed whatever they say, so it goes
	// on without them, with a warning.
	gated := p.changed || p.op != decision.Update
	bestEffort := func(err error) error {
		if gated {
			return err
		}
		p.warnings = append(p.warnings, "kausality: "+err.Error()+"; decided without it (this write changes no desired state)")
		return nil
	}

	// The parent: the controller owner of the object after the write (of
	// the stored object for deletes).
	owned := p.new
	if owned == nil {
		owned = p.old
	}
	parent, source, err := i.parentOf(ctx, p.namespace, owned, p.op == decision.Delete)
	if err != nil {
		return bestEffort(err)
	}
	p.parent, p.parentSource = parent, source
	// A write that removes or re-points the controller ownerReference is
	// decided against the owner it leaves too: moving a child away from a
	// frozen or settled parent is a write under that parent.
	if p.op == decision.Update && p.old != nil && p.new != nil && decision.ControllerMoved(p.old, p.new) {
		former, source, err := i.parentOf(ctx, p.namespace, p.old, true)
		if err != nil {
			return bestEffort(err)
		}
		if source != "gone" {
			p.formerParent, p.formerParentSource = former, source
		}
	}

	if ns := p.namespace; ns != "" {
		nsObj, _, err := i.cfg.Objects.GetShared(ctx, namespacesGVR, "", ns)
		switch {
		case err == nil:
			p.nsMode = nsObj.GetAnnotations()[annotations.Mode]
		case apierrors.IsNotFound(err):
			// Writes into a namespace that does not exist fail upstream.
		default:
			// The namespace may say enforce: deciding without it would
			// fail open.
			return bestEffort(i.unresolvable(fmt.Errorf("reading the namespace %s: %w", ns, err)))
		}
	}
	return nil
}

// storedNeed is how much of the stored child a write needs before it is
// decided.
type storedNeed int

const (
	// storedMetadata: the write is decided on the child's metadata, and
	// re-decided on the whole child when the verdict depends on more.
	storedMetadata storedNeed = iota
	// storedWhole: the write's effect is computed from the stored content
	// (a JSON patch addresses its fields, a /scale write reads the
	// replicas, a status write is learned with the stored spec).
	storedWhole
	// storedWithManagedFields: an apply is merged with the stored field
	// ownership, which no cache keeps.
	storedWithManagedFields
)

// storedNeedOf says how much of the stored child the write needs.
func storedNeedOf(r *http.Request, p *pending) storedNeed {
	wr := p.w
	switch {
	case wr.sub != mainResource:
		if wr.verb == "patch" && isApply(r) {
			return storedWithManagedFields
		}
		return storedWhole
	case p.op == decision.Delete, wr.verb == "update":
		return storedMetadata
	case wr.verb == "patch":
		pt, err := patch.TypeFor(r.Header.Get("Content-Type"))
		switch {
		case err != nil, pt == types.MergePatchType, pt == types.StrategicMergePatchType:
			// A merge patch leaves what it does not name as it is: applied
			// to the metadata it gives the metadata the write stores. A
			// content type that is not a patch fails in patched.
			return storedMetadata
		case pt == types.ApplyYAMLPatchType, pt == types.ApplyCBORPatchType:
			return storedWithManagedFields
		}
	}
	return storedWhole
}

func isApply(r *http.Request) bool {
	pt, err := patch.TypeFor(r.Header.Get("Content-Type"))
	return err == nil && (pt == types.ApplyYAMLPatchType || pt == types.ApplyCBORPatchType)
}

// storedObject reads the object the write applies to, as much of it as
// need says, and reports whether it is the cached metadata only. An update
// carries the resourceVersion it was based on (in decoded); when the cache
// holds an older one the cache is behind, and a live read gives the real
// stored object.
func (i *Interceptor) storedObject(ctx context.Context, wr *write, namespace string, decoded *unstructured.Unstructured, need storedNeed) (*unstructured.Unstructured, bool, error) {
	var (
		old    *unstructured.Unstructured
		source objects.Source
		err    error
	)
	switch need {
	case storedWithManagedFields:
		old, err = i.cfg.Objects.GetLive(ctx, wr.gvr, namespace, wr.info.Name)
		return old, false, err
	case storedWhole:
		old, source, err = i.cfg.Objects.GetWhole(ctx, wr.gvr, namespace, wr.info.Name)
	default:
		// A kind that is also a parent is cached whole anyway.
		if whole, ok := i.cfg.Objects.GetCachedWhole(wr.gvr, namespace, wr.info.Name); ok {
			old, source, need = whole, objects.FromCache, storedWhole
			break
		}
		old, source, err = i.cfg.Objects.GetMetadata(ctx, wr.gvr, namespace, wr.info.Name)
	}
	if err != nil || source != objects.FromCache {
		return old, false, err
	}
	if decoded != nil && wr.verb == "update" {
		if rv := decoded.GetResourceVersion(); rv != "" && rv != old.GetResourceVersion() {
			old, err = i.cfg.Objects.GetLive(ctx, wr.gvr, namespace, wr.info.Name)
			return old, false, err
		}
	}
	return old, need == storedMetadata, nil
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

// reloadStored replaces the stored object, which may come from a cache,
// with a live read, and recomputes what the write makes of it.
func (i *Interceptor) reloadStored(r *http.Request, p *pending) error {
	wr := p.w
	live, err := i.cfg.Objects.GetLive(r.Context(), wr.gvr, p.namespace, wr.info.Name)
	switch {
	case apierrors.IsNotFound(err):
		// Deleted meanwhile: kube-apiserver answers the write itself.
		return nil
	case err != nil:
		return i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", p.kind.Kind, qualifiedName(p.namespace, wr.info.Name), err))
	}
	p.old, p.oldIsMetadata = live, false
	if wr.verb == "patch" {
		if err := i.patched(r, p); err != nil {
			return err
		}
	}
	p.changed, p.changes = desiredChange(p.op, p.old, p.new)
	p.shownChanges = nil
	return nil
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

func (i *Interceptor) decide(r *http.Request, p *pending) decision.Decision {
	d := decision.Decide(i.input(r, p, p.parent, p.parentSource))
	if p.formerParent != nil {
		d = decision.UnderBoth(d, decision.Decide(i.input(r, p, p.formerParent, p.formerParentSource)))
	}
	if len(p.warnings) > 0 {
		d.Warnings = append(append([]string(nil), p.warnings...), d.Warnings...)
	}
	return d
}

// input is the decision's input for the write under parent.
func (i *Interceptor) input(r *http.Request, p *pending, parent *unstructured.Unstructured, parentSource string) decision.Input {
	u, _ := request.UserFrom(r.Context())
	in := decision.Input{
		Operation:         p.op,
		OldObject:         p.old,
		NewObject:         p.new,
		DesiredChanged:    p.changed,
		Changes:           p.changes,
		StatusWrite:       p.w.sub == statusSubresource,
		Parent:            parent,
		User:              u,
		FieldManager:      p.w.fieldManager,
		Mode:              decision.ModeInputs{Namespace: p.nsMode, Default: i.cfg.DefaultMode},
		DryRun:            p.w.dryRun,
		Confirmed:         p.confirmed,
		NoChangeIsCertain: p.noChangeIsCertain(),
		StaleUpdate:       p.staleUpdate(),
		Now:               i.cfg.Clock.Now(),
		Lifecycle:         p.settings.Lifecycle,
		UngatedKinds:      p.settings.UngatedChildKinds,
		ParentHidden:      parent != nil && (parent != p.formerParent && p.parentHidden || parent == p.formerParent && p.formerParentHidden),
	}
	if parent != nil {
		in.Policies = i.policyMatcher(r, p)
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
	in.OwnedRevisions = i.ownedRevisions(r.Context(), p, parent)
	if parent != nil && parentSource != "gone" {
		facts := i.settled.Assess(parent)
		in.Settle = &facts
	}
	return in
}

// ownedRevisions lists the revisions the parent controls when the write
// deletes one of them: only then can it be history pruning. A list that
// fails leaves the write to be decided as any other delete.
func (i *Interceptor) ownedRevisions(ctx context.Context, p *pending, parent *unstructured.Unstructured) []history.Revision {
	if p.op != decision.Delete || parent == nil || p.old == nil || !history.Kept(parent.GroupVersionKind().GroupKind(), p.kind.GroupKind()) {
		return nil
	}
	objs, err := i.cfg.Objects.Owned(ctx, p.w.gvr, p.namespace, parent.GetUID(), history.RevisionInMetadata(p.kind.GroupKind()))
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

// policyMatcher is the request's Matcher of the writer's approval
// policies, made when first needed.
func (i *Interceptor) policyMatcher(r *http.Request, p *pending) *policy.Matcher {
	if p.policies == nil && i.cfg.Policies != nil {
		if u, ok := request.UserFrom(r.Context()); ok {
			p.policies = policy.NewMatcher(r.Context(), i.cfg.Policies.For(u.GetName())...)
		}
	}
	return p.policies
}

// noChangeIsCertain: a stale stored object cannot hide a desired-state
// change of this write (see decision.Input.NoChangeIsCertain).
func (p *pending) noChangeIsCertain() bool {
	switch {
	case p.w.verb == "patch" && p.w.sub == mainResource:
		return patch.OnlyMetadata(p.patchTy, p.data)
	case p.w.verb == "update" && p.sent != nil && p.old != nil:
		return p.sent.GetResourceVersion() != "" && p.sent.GetResourceVersion() == p.old.GetResourceVersion()
	}
	return false
}

// staleUpdate: a PUT of a copy older than the stored object, which
// kube-apiserver refuses with a conflict. The stored object was read live
// when the cache did not have the version the PUT names (storedObject).
func (p *pending) staleUpdate() bool {
	if p.w.verb != "update" || p.sent == nil || p.old == nil {
		return false
	}
	rv := p.sent.GetResourceVersion()
	return rv != "" && rv != p.old.GetResourceVersion()
}

// desiredChange reports whether the write changes the desired state.
func desiredChange(op decision.Operation, old, new *unstructured.Unstructured) (bool, []desired.Change) {
	switch op {
	case decision.Delete:
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
