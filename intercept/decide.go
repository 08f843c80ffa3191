// Deciding one write: its surroundings (the parent snapshot, the one the
// write moves the child away from, the namespace) read around the facts
// gathered in facts.go, the pure decision package's input built from
// them, and the loop that fetches what the decision still asks for
// (decision.Needs) into a new facts value and decides again. The fetchers
// are here with the loop, so that a write, however many rounds it takes,
// enters this file once from serve.go and facts.go once from here: what a
// patch or a /scale write makes of an object read live is computed by
// the pure patch package, with what the first gathering read (the
// replicas path of a /scale). An object of a deletecollection is decided
// here once too (decideMember), through the same loop.

package intercept

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kausality-io/kausality-proxy/intercept/access"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/history"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/intercept/storedcopies"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
)

// decideOne gathers the facts of rq's write of one object, the body read
// from the client (facts.go), and decides it. The decision is empty when
// the write deletes an object that does not exist: kube-apiserver answers
// that itself. On an error, the facts are those known so far.
func (i *Interceptor) decideOne(x exchange, rq *writeRequest) (*facts, decision.Decision, error) {
	f, err := i.gatherOne(x.w, x.r, rq)
	if err != nil {
		return f, decision.Decision{}, err
	}
	return i.decideGathered(x.r, f, x.up)
}

// decideGathered reads the surroundings of the write whose own facts f
// holds, and decides it.
func (i *Interceptor) decideGathered(r *http.Request, f *facts, up upstream.Port) (*facts, decision.Decision, error) {
	err := i.withSurroundings(r.Context(), f)
	if err != nil || f.op == decision.Delete && f.old == nil {
		return f, decision.Decision{}, err
	}
	return i.decideOnFacts(r, f, up)
}

// decideMember decides one object of a deletecollection, f the facts of
// the DELETE of it, as that DELETE would be decided: under its parent, read
// once for all the siblings that share it (parents), and through the same
// loop as one write.
func (i *Interceptor) decideMember(r *http.Request, f *facts, parents sharedParents, up upstream.Port) (*facts, decision.Decision, error) {
	if parent, ok := parents.recall(f); ok {
		f.parent = parent
	} else {
		parent, source, err := i.parentOf(r.Context(), f.namespace, f.old, f.old.GetUID(), true)
		if err != nil {
			return f, decision.Decision{}, err
		}
		f.parent = i.parentFactsOf(r.Context(), f, parent, source)
	}
	f, d, err := i.decideOnFacts(r, f, up)
	// A parent confirmed live for one object is not read again for the
	// next.
	parents.remember(f)
	return f, d, err
}

// sharedParents holds one snapshot per controller ownerReference, for
// the objects of one deletecollection: they share few parents.
type sharedParents map[string]parentFacts

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

// recall is the latest snapshot of f's parent; ok also when f has no
// parent.
func (s sharedParents) recall(f *facts) (parentFacts, bool) {
	key := parentKey(f)
	if key == "" {
		return parentFacts{}, true
	}
	p, ok := s[key]
	return p, ok
}

// remember keeps f's snapshot of its parent for its siblings.
func (s sharedParents) remember(f *facts) {
	if key := parentKey(f); key != "" && f.parent.obj != nil {
		s[key] = f.parent
	}
}

// decideAgain decides f again after what moved under the write that was
// acted on: the parent (someone else changed it, maybe took the approval,
// or deleted it) is read afresh; when the object moved (the proxy's
// precondition failed), the object too, and nothing the last round
// confirmed counts.
func (i *Interceptor) decideAgain(r *http.Request, f *facts, what moved, up upstream.Port) (*facts, decision.Decision, error) {
	need := decision.Need{FreshParent: true}
	again := *f
	if what == objectMoved {
		again.confirmed, again.precondition, again.childLive = false, "", false
		need.LiveChild = f.op != decision.Create
		// A copy of the version the write was pinned to is what moved.
		need.NoCopy = need.LiveChild
	}
	again, err := i.refetch(r, again, need, up)
	if err != nil {
		return &again, decision.Decision{}, err
	}
	return i.decideOnFacts(r, &again, up)
}

// maxFetchRounds bounds the fetches of one decision; decision.Needs asks
// for each fact at most once, so it is never reached in practice.
const maxFetchRounds = 4

// decideOnFacts decides f, fetching what the decision still needs into a
// new facts value and deciding again until it needs nothing more.
func (i *Interceptor) decideOnFacts(r *http.Request, f *facts, up upstream.Port) (*facts, decision.Decision, error) {
	for fetches := 0; ; fetches++ {
		d := i.decide(f)
		need := decision.Needs(&d, f.held())
		if need.Conflict {
			return f, d, &olderVersionError{status: olderVersionConflict(f)}
		}
		if need.None() || fetches == maxFetchRounds {
			return f, d, nil
		}
		next, err := i.refetched(r, f, need, up)
		if err != nil {
			return f, d, err
		}
		f = next
	}
}

// refetched is refetch for the loop above: a new facts value, made where
// the loop's frame does not have to hold two.
//
//go:noinline
func (i *Interceptor) refetched(r *http.Request, f *facts, need decision.Need, up upstream.Port) (*facts, error) {
	next, err := i.refetch(r, *f, need, up)
	return &next, err
}

// decide decides f. It reads nothing: every fact it uses is in f.
func (i *Interceptor) decide(f *facts) decision.Decision {
	in := i.input(f, &f.parent)
	// The allowances of the parent the write ends up with are checked on
	// its own verdict, before a move's drift under the parent it leaves
	// relabels the decision.
	d := decision.DecideAllowances(f.req.context(), decision.Decide(in), in, i.allowanceInputs(f))
	if f.formerParent.obj != nil {
		former := decision.Decide(i.input(f, &f.formerParent))
		d = decision.UnderBoth(d, former)
		if former.Actor.IsController && f.req.w.sub != statusSubresource {
			// Its former parent's controller moves the child away.
			d = decision.KeepChildModes(d, f.old, f.new, f.req.writer)
		}
	}
	if f.req.w.sub == podSpecSubresource {
		// kube-apiserver keeps the stored pod's metadata: nothing the
		// decision would write into it would be stored.
		d.ChildAnnotations, d.OnStoredVersion = nil, false
	}
	if len(f.warnings) > 0 {
		d.Warnings = append(append([]string(nil), f.warnings...), d.Warnings...)
	}
	return d
}

// input is the decision's input for the write under parent.
func (i *Interceptor) input(f *facts, parent *parentFacts) decision.Input {
	rq := f.req
	in := decision.Input{
		Operation:                 f.op,
		OldObject:                 f.old,
		NewObject:                 f.new,
		DeleteOptions:             f.deleteOptions,
		DesiredChanged:            f.changed,
		Changes:                   f.shownChanges(),
		StatusWrite:               rq.w.sub == statusSubresource,
		StatusInObject:            f.statusInObject,
		ScaleWrite:                rq.w.sub == scaleSubresource,
		Parent:                    parent.obj,
		User:                      rq.user,
		UserHashes:                rq.userHashes,
		FieldManager:              rq.w.fieldManager,
		Mode:                      decision.ModeInputs{Namespace: f.nsModes[annotations.Mode], NamespaceModesBy: f.nsModes[annotations.ModesBy], Default: i.cfg.DefaultMode},
		DryRun:                    f.dryRun,
		Confirmed:                 f.confirmed,
		NoChangeIsCertain:         f.noChangeIsCertain(),
		StaleUpdate:               f.staleUpdate(),
		ApplyWithoutSchema:        (f.patchType == types.ApplyYAMLPatchType || f.patchType == types.ApplyCBORPatchType) && !patch.SchemaKnown(f.kind),
		NamesResourceVersion:      rq.w.sub == statusSubresource && f.namesResourceVersion(),
		ObservedGenerationPending: i.observedGenerationPending(f),
		UnboundStatusRecordDelay:  i.unboundStatusRecordDelay(rq, f),
		ObjectLive:                f.childLive,
		NamesControls:             f.namesControls,
		Now:                       i.cfg.Clock.Now(),
		Lifecycle:                 rq.settings.Lifecycle,
		UngatedKinds:              rq.settings.UngatedChildKinds,
		ParentHidden:              parent.obj != nil && parent.hidden,
		OwnedRevisions:            parent.revisions,
		Settle:                    parent.settle,
	}
	if parent.obj != nil {
		in.Policies = rq.policies
	}
	in.WrittenPaths, in.WrittenCoarse = i.writtenPaths(f)
	if rq.controller != nil && rq.controller.Mode != annotations.ModeShadow {
		in.Mode.Controller = string(rq.controller.Mode)
	}
	in.Child = decision.ObjectRef{APIVersion: f.kind.GroupVersion().String(), Kind: f.kind.Kind, Namespace: f.namespace, Name: rq.w.info.Name}
	if in.Child.Name == "" && f.new != nil {
		in.Child.Name = f.new.GetName()
		if in.Child.Name == "" {
			in.Child.Name = f.new.GetGenerateName()
		}
	}
	return in
}

// shownChanges are the changes messages may show: with their stored and
// new values only to a caller who may read the object, and never for a
// Secret.
func (f *facts) shownChanges() []desired.Change {
	if !f.childAccessKnown || f.mayReadChild && f.kind.GroupKind() != (schema.GroupKind{Kind: "Secret"}) {
		return f.changes
	}
	out := make([]desired.Change, len(f.changes))
	for i, c := range f.changes {
		out[i] = desired.Change{Path: c.Path}
	}
	return out
}

// held says which of f's facts are first-hand, for decision.Needs.
func (f *facts) held() decision.Held {
	sub := f.req.w.sub
	return decision.Held{
		Confirmable:       (sub == mainResource || sub == scaleSubresource) && !f.confirmed,
		MainResource:      sub == mainResource,
		StatusWrite:       sub == statusSubresource,
		ChildLive:         f.childLive,
		ChildListed:       f.listed,
		ParentFromCache:   f.parent.source == "cache",
		ChildAccessKnown:  f.childAccessKnown,
		ParentAccessKnown: f.parentAccessKnown,
		HasChanges:        len(f.changes) > 0,
		ChildMetadataOnly: f.oldIsMetadata,
		Operation:         f.op,
		NamesOtherVersion: f.namesOtherVersion(),
		NamesOlderVersion: f.childLive && f.staleUpdate(),
	}
}

// errObjectModified is how kube-apiserver's storage words the failure of
// a resourceVersion precondition.
var errObjectModified = errors.New("the object has been modified; please apply your changes to the latest version and try again")

// olderVersionConflict is kube-apiserver's answer to an update of f's
// object that names an older resourceVersion, word for word.
func olderVersionConflict(f *facts) *apierrors.StatusError {
	return apierrors.NewConflict(f.req.w.gvr.GroupResource(), f.req.w.info.Name, errObjectModified)
}

// olderVersionError: the write was decided, and kube-apiserver's answer to
// it is known without asking, the conflict it gives an update of an older
// version. The verdict is logged with it.
type olderVersionError struct{ status *apierrors.StatusError }

func (e *olderVersionError) Error() string { return e.status.Error() }

// namesOtherVersion: the write names a resourceVersion, and not the one of
// the stored object it is decided on. The object the write makes carries
// the version a patch names (the stored one when it names none).
func (f *facts) namesOtherVersion() bool {
	if f.old == nil || f.new == nil {
		return false
	}
	rv := f.new.GetResourceVersion()
	if f.sent != nil {
		rv = f.sent.GetResourceVersion()
	}
	return patch.NamesVersion(rv) && !patch.SameVersion(rv, f.old.GetResourceVersion())
}

// noChangeIsCertain: a stale stored object cannot hide a desired-state
// change of this write (see decision.Input.NoChangeIsCertain).
func (f *facts) noChangeIsCertain() bool {
	wr := f.req.w
	switch {
	case wr.verb == "patch" && wr.sub == mainResource:
		return patch.OnlyMetadata(f.patchType, f.data)
	case wr.verb == "update" && wr.sub == mainResource && f.sent != nil && f.old != nil:
		return f.sent.GetResourceVersion() != "" && f.sent.GetResourceVersion() == f.old.GetResourceVersion()
	}
	return false
}

// unboundStatusRecordDelay is how long a deferred record of the object f's
// write writes waits: its kind's setting in the config file, else the
// flag's.
func (i *Interceptor) unboundStatusRecordDelay(rq *writeRequest, f *facts) time.Duration {
	if d, ok := rq.settings.UnboundStatusRecordDelay(f.kind.GroupKind()); ok {
		return d
	}
	return i.cfg.UnboundStatusRecordDelay
}

// observedGenerationPending is the generation a deferred record of the
// written object waits to record, 0 when none waits.
func (i *Interceptor) observedGenerationPending(f *facts) int64 {
	if f.req.w.sub != statusSubresource || f.old == nil {
		return 0
	}
	v, ok := i.deferred.Pending(f.old.GetUID(), annotations.ObservedGeneration)
	if !ok {
		return 0
	}
	g, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0
	}
	return g
}

// namesResourceVersion reports whether the client's write names the
// resourceVersion it was made on.
func (f *facts) namesResourceVersion() bool {
	switch {
	case f.req.w.verb == "patch":
		var patched metav1.Object
		if f.new != nil {
			patched = f.new
		}
		return patch.NamesResourceVersion(f.patchType, f.data, patched)
	case f.sent != nil:
		return patch.NamesVersion(f.sent.GetResourceVersion())
	}
	return false
}

// staleUpdate: a PUT of a copy older than the stored object, which
// kube-apiserver refuses with a conflict. The stored object was read live
// when the cache did not have the version the PUT names (storedObject).
func (f *facts) staleUpdate() bool {
	wr := f.req.w
	if wr.verb != "update" || wr.sub != mainResource || f.sent == nil || f.old == nil {
		return false
	}
	rv := f.sent.GetResourceVersion()
	return patch.NamesVersion(rv) && !patch.SameVersion(rv, f.old.GetResourceVersion())
}

// allowanceInputs are the facts of f the allowance check needs.
func (i *Interceptor) allowanceInputs(f *facts) decision.AllowanceInputs {
	var a decision.AllowanceInputs
	a.NamespaceAnnotations = f.nsModes
	if i.cfg.AllowancePolicies != nil && allowancesChecked(f, a.NamespaceAnnotations) {
		a.Policies = i.cfg.AllowancePolicies.All()
	}
	if f.old != nil && f.old.GetAnnotations()[annotations.Allowances] != "" {
		if _, r, ok := i.settled.Record(f.old.GetUID()); ok {
			a.ObjectSettledGeneration = r.SettledAt
		}
	}
	return a
}

// allowancesChecked reports whether an allowance mode is on where the
// allowance check looks for it: the stored object's (allowances it
// initiates or prunes) or the parent's (allowances its children use),
// else the namespace's; or whether one of them was set or removed through
// the proxy, which the decision may undo (a controller's own change of the
// mode does not decide how its writes are checked). With every mode off
// the policies are not read.
func allowancesChecked(f *facts, namespace map[string]string) bool {
	if annotations.ModeSetBy(namespace, annotations.AllowanceMode).User != "" {
		return true
	}
	for _, obj := range []*unstructured.Unstructured{f.old, f.parent.obj} {
		var ann map[string]string
		if obj != nil {
			ann = obj.GetAnnotations()
		}
		if mode, _ := allowance.ModeOf(ann, namespace); mode != allowance.ModeOff || annotations.ModeSetBy(ann, annotations.AllowanceMode).User != "" {
			return true
		}
	}
	return false
}

// context is the request's context, or the background for steps made
// without one.
func (rq *writeRequest) context() context.Context {
	if rq.ctx == nil {
		return context.Background()
	}
	return rq.ctx
}

// withSurroundings reads what the decision needs besides the object: the
// parent (and the one the write moves the child away from) and the
// namespace, into f, whose own facts are gathered.
func (i *Interceptor) withSurroundings(ctx context.Context, f *facts) error {
	// A status write is never gated: it records on the written object
	// itself, and never fails because a parent cannot be read.
	if f.req.w.sub == statusSubresource {
		return nil
	}
	// gated: the verdict depends on the parent and the namespace, so a
	// failure to read them follows the failure policy. A write that
	// changes no desired state is allowed whatever they say, so it goes
	// on without them, with a warning.
	gated := f.changed || f.op != decision.Update
	bestEffort := func(err error) error {
		if gated {
			return err
		}
		f.warnings = append(append([]string(nil), f.warnings...), "kausality: "+err.Error()+"; decided without it (this write changes no desired state)")
		return nil
	}

	// The parent: the controller owner of the object after the write (of
	// the stored object for deletes).
	owned := f.new
	if owned == nil {
		owned = f.old
	}
	parent, source, err := i.parentOf(ctx, f.namespace, owned, storedUID(f), f.op == decision.Delete)
	if err != nil {
		return bestEffort(err)
	}
	f.parent = i.parentFactsOf(ctx, f, parent, source)
	// A write that removes or re-points the controller ownerReference is
	// decided against the owner it leaves too: moving a child away from a
	// frozen or settled parent is a write under that parent.
	if f.op == decision.Update && f.old != nil && f.new != nil && decision.ControllerMoved(f.old, f.new) {
		former, source, err := i.parentOf(ctx, f.namespace, f.old, f.old.GetUID(), true)
		if err != nil {
			return bestEffort(err)
		}
		if source != "gone" {
			f.formerParent = i.parentFactsOf(ctx, f, former, source)
		}
	}

	if ns := f.namespace; ns != "" {
		nsObj, _, err := i.cfg.Objects.GetShared(ctx, namespacesGVR, "", ns)
		switch {
		case err == nil:
			f.nsModes = annotations.ModesOf(nsObj.GetAnnotations())
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

// parentOf reads the controller owner of owned (nil when it has none), and
// where it came from: the cache, a live read, or "gone". self is the uid
// of the object as stored: an object whose controller reference names
// itself has no parent to carry out a change of, and is decided as one
// with none (a new origin), not under itself, where it would be its own
// controller's child and extend its own trace with every write.
func (i *Interceptor) parentOf(ctx context.Context, namespace string, owned *unstructured.Unstructured, self types.UID, unservedIsGone bool) (*unstructured.Unstructured, string, error) {
	if owned == nil {
		return nil, "", nil
	}
	ref := metav1.GetControllerOfNoCopy(owned)
	if ref == nil || self != "" && ref.UID == self {
		return nil, "", nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, "", apierrors.NewBadRequest(fmt.Sprintf("the controller ownerReference has an invalid apiVersion %q: %v", ref.APIVersion, err))
	}
	// The parent snapshot is only read: no copy of the cached object.
	parent, source, err := i.cfg.Objects.GetKindShared(ctx, gv.WithKind(ref.Kind).GroupKind(), namespace, ref.Name)
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

// storedUID is the uid of f's object as stored, which no write changes;
// "" for a create: kube-apiserver gives the new object a uid of its own,
// which no reference in the body can name yet.
func storedUID(f *facts) types.UID {
	if f.old != nil {
		return f.old.GetUID()
	}
	return ""
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
	if history.RunByPods(f.kind.GroupKind()) {
		// Without the pods, a revision one of them runs would be taken
		// for one retired. They are read live: the caches of children
		// keep no labels.
		pods, err := i.cfg.Objects.Owned(ctx, podsGVR, f.namespace, parent.GetUID(), false)
		if err != nil {
			return nil
		}
		hashes := make(map[string]bool, len(pods))
		for _, p := range pods {
			if h := p.GetLabels()[history.RevisionHashLabel]; h != "" {
				hashes[h] = true
			}
		}
		history.MarkRunning(revs, hashes)
	}
	return revs
}

// podsGVR is the resource of the pods that run a parent's revisions.
var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

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
			f.changed, f.changes = decision.DesiredChange(f.op, f.old, f.new)
		}
	case need.LiveChild && got.live != nil:
		if f, err = withLiveChild(f, got.live); err != nil {
			return f, err
		}
		// A copy stands where the cached metadata stood: a verdict that
		// is confirmed still reads the child live (serverResultOf).
		f.childLive, f.oldIsCopy = !got.copied, got.copied
	}
	if need.ChildAccess {
		f.childAccessKnown, f.mayReadChild = true, got.mayReadChild
	}
	if need.ParentAccess {
		f.parentAccessKnown = true
		if f.parent.obj != nil {
			f.parent.hidden = got.parentHidden
		}
		if f.formerParent.obj != nil {
			f.formerParent.hidden = got.formerParentHidden
		}
	}
	return f, nil
}

// fetched is what one round of reads brought.
type fetched struct {
	live *unstructured.Unstructured
	// copied: live is the stored copy of the cached version, not a read.
	copied bool
	server serverResult
	parent parentFacts
	// Whether the caller may read the object, and not its parents. A
	// parent read afresh is the one asked about: the same object.
	mayReadChild, parentHidden, formerParentHidden bool
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
			got.live, got.copied, liveErr = i.wholeChild(r.Context(), f, !need.NoCopy)
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
	ctx := r.Context()
	if need.ChildAccess {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got.mayReadChild = f.kind.GroupKind() != (schema.GroupKind{Kind: "Secret"}) && i.access.MayGet(ctx, access.Attributes(f.req.user, f.req.w.info, "get"), f.req.w.info.Name)
		}()
	}
	if need.ParentAccess && f.parent.obj != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got.parentHidden = !i.access.MayGetParent(ctx, f.req.user, f.parent.obj)
		}()
	}
	if need.ParentAccess && f.formerParent.obj != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got.formerParentHidden = !i.access.MayGetParent(ctx, f.req.user, f.formerParent.obj)
		}()
	}
	wg.Wait()
	return got, errors.Join(serverErr, liveErr, parErr)
}

// withLiveChild returns f with the stored object read live, and what the
// write makes of it: a PUT's object is the client's whatever is stored; a
// patch and a /scale write apply to it, as they did to what the first
// round read.
func withLiveChild(f facts, live *unstructured.Unstructured) (facts, error) {
	f.old, f.childLive, f.oldIsMetadata = live, true, false
	if f.req.w.sub == podSpecSubresource {
		// Still the change of the pod's spec it was taken for, whatever
		// the pod holds.
		f.new = live.DeepCopy()
		return f, nil
	}
	if f.req.w.sub == scaleSubresource || f.req.w.verb == "patch" {
		var err error
		if f.new, err = f.fromStored.Produce(live); err != nil {
			return f, err
		}
	}
	if f.req.w.sub != statusSubresource {
		f.changed, f.changes = decision.DesiredChange(f.op, f.old, f.new)
	}
	return f, nil
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
		return nil, i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", f.kind.Kind, cache.NewObjectName(f.namespace, wr.info.Name).String(), err))
	}
	if f.oldIsMetadata {
		i.copies.PutObject(storedcopies.Key{Resource: wr.gvr, Kind: f.kind, Namespace: f.namespace, Name: wr.info.Name}, live)
	}
	return live, nil
}

// wholeChild is the whole stored child for a write decided so far on its
// cached metadata: the copy the proxy last saw of the cached version when
// mayCopy, else the child read live.
func (i *Interceptor) wholeChild(ctx context.Context, f *facts, mayCopy bool) (_ *unstructured.Unstructured, copied bool, _ error) {
	if mayCopy && f.oldIsMetadata && f.old != nil {
		key := storedcopies.Key{Resource: f.req.w.gvr, Kind: f.kind, Namespace: f.namespace, Name: f.req.w.info.Name}
		if cp, ok := i.copies.At(key, f.old.GetResourceVersion()); ok {
			return cp, true, nil
		}
	}
	live, err := i.liveChild(ctx, f)
	return live, false, err
}

// serverResultOf reads the stored object live (unless the write is pinned
// to a version the proxy holds whole) and asks kube-apiserver, in a dry
// run as the caller, what the same request would store. The answer is
// read here, whatever the caller accepts.
func (i *Interceptor) serverResultOf(r *http.Request, f *facts, up upstream.Port) (serverResult, error) {
	if f.childLive {
		// Read live already, for this round: the precondition is that
		// read's resourceVersion.
		if f.old == nil {
			return serverResult{}, nil
		}
		return i.dryRunOn(r, f, up, f.data, f.old)
	}
	if cp, data, pinnedByProxy, ok := i.copyPinned(f); ok {
		// The dry run succeeds only while the copy's version is the
		// stored one, so the copy is what it was applied to: a live read
		// would tell nothing more, and would race the dry run besides.
		res, err := i.dryRunOn(r, f, up, data, cp)
		var refused *upstream.RefusedError
		if !pinnedByProxy || !errors.As(err, &refused) || refused.Answer.Code() != http.StatusConflict {
			return res, err
		}
		// The copy is older than the stored child (or the patch
		// conflicts anyway): the precondition was the proxy's own, so the
		// caller never hears of it, and the write is confirmed on a live
		// read.
	}
	var (
		live    *unstructured.Unstructured
		liveErr error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		live, liveErr = i.liveChild(r.Context(), f)
	}()
	answer, err := i.dryRun(r, up, f.data)
	<-done
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
	return i.serverResultFrom(f, answer, live)
}

// dryRunOn asks kube-apiserver what the request with body data would
// store, the stored object being live.
func (i *Interceptor) dryRunOn(r *http.Request, f *facts, up upstream.Port, data []byte, live *unstructured.Unstructured) (serverResult, error) {
	answer, err := i.dryRun(r, up, data)
	if err != nil {
		return serverResult{}, err
	}
	return i.serverResultFrom(f, answer, live)
}

// dryRun sends r with body data as a server-side dry run, as the caller.
func (i *Interceptor) dryRun(r *http.Request, up upstream.Port, data []byte) (*upstream.Answer, error) {
	dry := r.Clone(r.Context())
	dry.Header.Set("Accept", "application/json")
	return up.DryRun(dry, data, maxConfirmAnswer)
}

// serverResultFrom reads kube-apiserver's answer to the dry run of f's
// write applied to live.
func (i *Interceptor) serverResultFrom(f *facts, answer *upstream.Answer, live *unstructured.Unstructured) (serverResult, error) {
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
		var err error
		if stored, err = desired.ScaleToPath(stored, live, f.fromStored.ReplicasPath); err != nil {
			return serverResult{}, apierrors.NewInternalError(err)
		}
	}
	return serverResult{live: live, stored: stored}, nil
}

// copyPinned is the whole stored child at the version f's write of the
// main resource is pinned to, when the proxy holds it (kept from a live
// read or from kube-apiserver's answer to a write), and the body to
// dry-run: a PUT naming the cached version is pinned by the caller; a
// patch, which names none, is pinned by the proxy (pinnedByProxy) to the
// cached version, which kube-apiserver then takes as a precondition.
func (i *Interceptor) copyPinned(f *facts) (cp *unstructured.Unstructured, data []byte, pinnedByProxy, ok bool) {
	wr := f.req.w
	if wr.sub != mainResource || f.old == nil || f.op != decision.Update {
		return nil, nil, false, false
	}
	rv := f.old.GetResourceVersion()
	switch {
	case wr.verb == "update" && f.sent != nil:
		if rv == "" || f.sent.GetResourceVersion() != rv {
			return nil, nil, false, false
		}
		data = f.data
	case wr.verb == "patch":
		pinned, added, err := patch.WithResourceVersion(f.patchType, f.data, rv, f.new)
		if err != nil || !added {
			return nil, nil, false, false
		}
		data, pinnedByProxy = pinned, true
	default:
		return nil, nil, false, false
	}
	if f.oldIsCopy && !f.oldIsMetadata {
		return f.old, data, pinnedByProxy, true
	}
	cp, ok = i.copies.At(storedcopies.Key{Resource: wr.gvr, Kind: f.kind, Namespace: f.namespace, Name: wr.info.Name}, rv)
	return cp, data, pinnedByProxy, ok
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

// podSpecWrittenPaths are the paths of a pod's spec kube-apiserver takes
// from a write to subresource (podResizeStrategy keeps every container's
// resources and resizePolicy, the restartable init containers' too, and
// the pod-level resources; podEphemeralContainersStrategy the ephemeral
// containers), named at a level no container index is needed for.
func podSpecWrittenPaths(subresource string) []string {
	if subresource == "ephemeralcontainers" {
		return []string{"spec.ephemeralContainers"}
	}
	return []string{"spec.containers", "spec.initContainers", "spec.resources"}
}

// writtenPaths are the desired-state paths a merge patch of a child known
// only by its metadata can change, for the allowance check (nil: the
// check reads them from the stored and the new object).
func (i *Interceptor) writtenPaths(f *facts) ([]string, bool) {
	wr := f.req.w
	if wr.sub == podSpecSubresource {
		// Decided on a copy of the stored pod, which shows no change: what
		// kube-apiserver may take from the write is what it changes.
		return podSpecWrittenPaths(wr.info.Subresource), true
	}
	if !f.oldIsMetadata || f.childLive || wr.verb != "patch" || wr.sub != mainResource || f.op != decision.Update ||
		f.patchType != types.MergePatchType && f.patchType != types.StrategicMergePatchType || i.cfg.AllowancePolicies == nil {
		return nil, false
	}
	if !allowancesChecked(f, f.nsModes) {
		return nil, false
	}
	paths, coarse, ok := allowance.WrittenPaths(f.data, f.patchType == types.StrategicMergePatchType)
	if !ok {
		return nil, false
	}
	if paths == nil {
		paths = []string{}
	}
	return paths, coarse
}
