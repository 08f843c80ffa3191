// The facts of one write, gathered once into a value that nothing changes
// afterwards: the body read and decoded once, the kind, the stored object,
// the effective new object and the desired-state change. decide.go adds
// the surroundings (the parent, the namespace) and, when a decision needs
// more, fetches it into a new value made from the old one. A
// deletecollection's own facts (its body, its options, the kind) are
// gathered here once too; each object it would delete gets its facts from
// them in collection.go.

package intercept

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/history"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/intercept/storedcopies"
	"github.com/kausality-io/kausality-proxy/intercept/subresources"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
)

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// facts is what one decision is made on. A value: a round that learns
// more makes a new one, and none is changed once a decision was made on
// it. It is large, and handed down the write path by pointer: passed by
// value, every call on the way copied it and held it in its frame.
type facts struct {
	req  *writeRequest
	data []byte
	// dryRun: the query's dryRun, or a delete's options in its body.
	dryRun bool
	// statusInObject: the written object's status is written with it (a
	// custom resource without a status subresource): a write of it that
	// advances its observed generation is its controller's.
	statusInObject bool
	// namesControls: a patch that could set or remove a control of the
	// object whatever it holds (decision.Input.NamesControls).
	namesControls bool
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
	// fromStored computes the object a PATCH or a /scale write makes of
	// the stored object, in the first round and for every live read of a
	// later one.
	fromStored patch.FromStored
	// sent is the object the client sent (creates and updates), or the
	// Scale of a /scale PUT.
	sent *unstructured.Unstructured
	// decoded is sent as decoded from data: while sent is still it, the
	// proxy's changes can be written into data rather than into a new
	// encoding of sent.
	decoded  *unstructured.Unstructured
	old, new *unstructured.Unstructured
	changed  bool
	changes  []desired.Change
	// parent is the controller owner of the object after the write;
	// formerParent the one the write moves the child away from.
	parent, formerParent parentFacts
	// nsModes are the namespace's modes (kausality.io/mode and
	// kausality.io/allowance-mode) with the record of who set them.
	nsModes map[string]string
	// warnings are about facts that could not be read but were not needed.
	warnings []string
	// childLive: old was read live, or is the copy of the version a
	// confirmed update named (serverResultOf): what kube-apiserver
	// stored when it answered.
	childLive bool
	// listed: old comes from the live list of what a deletecollection
	// deletes, the snapshot the request is decided on.
	listed bool
	// deleteOptions are a delete's options (nil: none read).
	deleteOptions *metav1.DeleteOptions
	// oldIsCopy: old is the whole stored child as the proxy last saw it
	// (storedcopies), of the version the write is decided on.
	oldIsCopy bool
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
func (i *Interceptor) gatherOne(w http.ResponseWriter, r *http.Request, rq *writeRequest) (*facts, error) {
	data, err := i.readInterceptedBody(w, r)
	if err != nil {
		return rq.requestFacts(), err
	}
	bodyDryRun, err := deleteDryRun(r, rq.w, data)
	if err != nil {
		return rq.requestFacts(), err
	}
	// kube-apiserver reads a delete's options from its body: a dry run
	// there is as much a dry run as one in the query, and must consume
	// nothing.
	f, err := i.gather(r.Context(), rq, data, rq.w.dryRun || bodyDryRun)
	if err == nil && f.op == decision.Delete {
		f.deleteOptions, err = deleteOptionsOf(r, rq.w, data)
	}
	return f, err
}

// deleteOptionsOf are the options of a single delete: a DELETE's own, or
// the deleteOptions of an Eviction, which kube-apiserver deletes the pod
// with (nil: none).
func deleteOptionsOf(r *http.Request, wr *write, data []byte) (*metav1.DeleteOptions, error) {
	switch {
	case wr.sub == mainResource:
		return upstream.DeleteOptionsOf(r, data)
	case wr.sub != evictionSubresource || len(data) == 0:
		return nil, nil
	}
	eviction, _, err := body.DecodeOfKind(r.Header.Get("Content-Type"), data, evictionGVK)
	if err != nil {
		return nil, err
	}
	m, ok, err := unstructured.NestedMap(eviction.Object, "deleteOptions")
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the Eviction's deleteOptions: %v", err))
	}
	if !ok {
		return nil, nil
	}
	opts := &metav1.DeleteOptions{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, opts); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the Eviction's deleteOptions: %v", err))
	}
	return opts, nil
}

// requestFacts are the facts known of rq's write before its body is read.
func (rq *writeRequest) requestFacts() *facts {
	return &facts{req: rq, op: rq.w.op, namespace: rq.w.namespace, dryRun: rq.w.dryRun}
}

// gather reads the write's own facts, its body being data; its
// surroundings are read by decideGathered.
func (i *Interceptor) gather(ctx context.Context, rq *writeRequest, data []byte, dryRun bool) (*facts, error) {
	wr := rq.w
	f := &facts{req: rq, data: data, dryRun: dryRun, op: wr.op, namespace: wr.namespace}
	kind, namespace, err := i.resolveKind(wr)
	if err != nil {
		return f, err
	}
	f.kind, f.namespace = kind, namespace
	// A whole object in the body is decoded once, before any read: a body
	// that cannot be decoded costs no I/O, and its resourceVersion tells
	// whether the cache is behind.
	if f.op != decision.Delete && wr.verb != "patch" {
		obj, format, err := body.Decode(rq.contentType, data, f.decodedAs())
		if err != nil {
			return f, err
		}
		f.sent, f.decoded, f.format = obj, obj, format
		// A PUT that names no resourceVersion is applied to whatever is
		// stored and replaces its annotations whole: it removes a control
		// the proxy's copy may not hold yet, as a patch naming it would.
		if wr.verb == "update" && (wr.sub == mainResource || wr.sub == statusSubresource) && obj != nil && !patch.NamesVersion(obj.GetResourceVersion()) {
			f.namesControls = true
		}
	}
	if wr.verb == "patch" {
		if f.patchType, err = patchTypeOf(rq.contentType, data); err != nil {
			return f, err
		}
		if f.force, err = readForce(rq.w.force); err != nil {
			return f, err
		}
		f.fromStored.Patch = &patch.Request{Type: f.patchType, Patch: data, Kind: f.kind, Name: wr.info.Name, Namespace: f.namespace,
			FieldManager: wr.fieldManager, FieldManagerNamed: wr.explicitFieldManager, Force: f.force}
		if wr.sub == mainResource || wr.sub == statusSubresource {
			f.namesControls = patch.NamesAnnotation(f.patchType, data, controlKeys, f.kind)
		}
	}
	if f.op != decision.Create {
		stored, err := i.storedObject(ctx, f, storedNeedOf(f))
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return f, i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", kind.Kind, cache.NewObjectName(f.namespace, wr.info.Name).String(), err))
		default:
			f.old, f.childLive, f.oldIsMetadata, f.oldIsCopy = stored.obj, stored.live, stored.metadataOnly, stored.copy
		}
	}
	if err = i.unconditionalUpdateRefused(ctx, f); err != nil {
		return f, err
	}
	if err = i.withEffectiveObject(ctx, f); err != nil {
		return f, err
	}
	if f.new != nil && wr.sub == mainResource && f.op == decision.Update && f.new.Object["status"] != nil {
		// Not knowing counts as a status subresource: the writer is then
		// not recorded, as before the resource was written at all.
		f.statusInObject, _ = i.scalePaths.StatusInObject(ctx, wr.gvr)
	}
	if f.oldIsMetadata && wr.verb == "patch" && patch.OnlyMetadata(f.patchType, f.data) {
		// A patch of metadata alone changes no desired state, whatever
		// the child holds: its metadata is all the decision reads.
		f.changed, f.changes, f.oldIsMetadata = false, nil, false
	}
	return f, nil
}

// patchTypeOf is the type of a patch sent as contentType. A JSON patch,
// merge patch or strategic merge patch with a member twice in one object
// is refused (body.CheckMembersOnce); an apply's YAML and CBOR are read
// alike by kube-apiserver and the proxy.
func patchTypeOf(contentType string, data []byte) (types.PatchType, error) {
	t, err := patch.TypeFor(contentType)
	if err != nil || t == types.ApplyYAMLPatchType || t == types.ApplyCBORPatchType {
		return t, err
	}
	return t, body.CheckMembersOnce(data)
}

// unconditionalUpdateRefused is kube-apiserver's own answer to f, when
// f is an update of an existing object (or its status) that names no
// resourceVersion, of a kind whose updates must name one. Decided as any
// other update, it would be pinned to the version the proxy read, and
// land where kube-apiserver refuses it: a caller that read nothing would
// overwrite what others wrote meanwhile. A kind whose
// CustomResourceDefinition cannot be read is taken for one that allows
// such an update (the write is then decided and pinned, as before).
func (i *Interceptor) unconditionalUpdateRefused(ctx context.Context, f *facts) error {
	wr := f.req.w
	if wr.verb != "update" || wr.sub != mainResource && wr.sub != statusSubresource ||
		f.sent == nil || f.old == nil || patch.NamesVersion(f.sent.GetResourceVersion()) {
		return nil
	}
	custom, _ := i.scalePaths.CustomResource(ctx, wr.gvr)
	statusInObject := false
	if custom {
		statusInObject, _ = i.scalePaths.StatusInObject(ctx, wr.gvr)
	}
	if !decision.UpdateNeedsResourceVersion(wr.gvr.GroupResource(), wr.sub == statusSubresource, custom, !statusInObject) {
		return nil
	}
	if !f.childLive {
		// The cache may still hold an object deleted a moment ago, for
		// which kube-apiserver answers 404, and a controller recreates
		// on a 404 where it retries a 422. Only this refusal reads the
		// object live; a read that fails leaves the cache's answer.
		if _, err := i.cfg.Objects.GetLive(ctx, wr.gvr, f.namespace, wr.info.Name); apierrors.IsNotFound(err) {
			f.old, f.childLive, f.oldIsMetadata, f.oldIsCopy = nil, true, false, false
			return nil
		}
	}
	return decision.ResourceVersionRequired(wr.gvr.GroupResource(), wr.info.Name)
}

// gatherCollectionOne reads the body of rq's deletecollection from r and
// gathers the request's own facts: its body, whether its options make it
// a dry run, and the kind and namespace of what it deletes. Each object
// it would delete gets the facts of the DELETE of it from these
// (collection.go). On an error, the facts are those known so far.
// controlKeys are the annotations that hold people's controls over an
// object.
var controlKeys = append(annotations.ControlKeys(), annotations.LastApplied)

// decodedAs is the kind a whole object in the body is decoded as: the
// resource's, or a Scale for a /scale write.
func (f *facts) decodedAs() *schema.GroupVersionKind {
	if f.req.w.sub == scaleSubresource {
		return &patch.ScaleKind
	}
	return &f.kind
}

func (i *Interceptor) gatherCollectionOne(w http.ResponseWriter, r *http.Request, rq *writeRequest) (facts, error) {
	data, err := i.readInterceptedBody(w, r)
	if err != nil {
		return facts{req: rq, op: rq.w.op, namespace: rq.w.namespace, dryRun: rq.w.dryRun}, err
	}
	return i.gatherCollection(r, rq, data)
}

// gatherCollection gathers the own facts of rq's deletecollection, its
// body being data.
func (i *Interceptor) gatherCollection(r *http.Request, rq *writeRequest, data []byte) (facts, error) {
	f := facts{req: rq, data: data, op: rq.w.op, namespace: rq.w.namespace, dryRun: rq.w.dryRun}
	opts, err := upstream.DeleteOptionsOf(r, data)
	if err != nil {
		return f, err
	}
	kind, namespace, err := i.resolveKind(rq.w)
	if err != nil {
		return f, err
	}
	// kube-apiserver reads the options of a deletecollection from its body
	// when it has one, and from the query only when it has none: a dryRun
	// in the body counts, one in the query next to a body does not. Any
	// value counts, as in classify: one other than All is refused.
	f.kind, f.namespace, f.dryRun, f.deleteOptions = kind, namespace, len(opts.DryRun) > 0, opts
	return f, nil
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
// one; and the desired-state change; into f, whose stored object is read.
func (i *Interceptor) withEffectiveObject(ctx context.Context, f *facts) error {
	wr := f.req.w
	var err error
	switch {
	case f.op == decision.Delete:
	case wr.sub == podSpecSubresource:
		if f.old == nil {
			return apierrors.NewNotFound(wr.gvr.GroupResource(), wr.info.Name)
		}
		// Taken as a change of what it may change, whatever its body
		// says: the stored pod, which it leaves as it is otherwise.
		f.new = f.old.DeepCopy()
		f.changed, f.changes = true, []desired.Change{{Path: podSpecPath(wr.info.Subresource)}}
		return nil
	case wr.sub == scaleSubresource:
		if f.old == nil {
			return apierrors.NewNotFound(wr.gvr.GroupResource(), wr.info.Name)
		}
		// Read with the first gathering, so that no later round reads it.
		if f.fromStored.ReplicasPath, err = i.specReplicasPath(ctx, wr.gvr); err != nil {
			return err
		}
		f.fromStored.Scale, f.fromStored.Sent = true, f.sent
		if f.new, err = f.fromStored.Produce(f.old); err != nil {
			return err
		}
	case wr.verb == "patch" && f.oldIsMetadata && f.patchType != types.MergePatchType && f.patchType != types.StrategicMergePatchType:
		return i.patchedMetadata(ctx, f)
	case wr.verb == "patch":
		if f.new, err = f.fromStored.Produce(f.old); err != nil {
			if apierrors.IsInvalid(err) && !patch.IsOptionsError(err) && f.old != nil && !f.childLive {
				// A patch that does not apply to a copy of the stored
				// object may apply to the object as stored, which is what
				// kube-apiserver applies it to: a test of the
				// resourceVersion, a removal of a member added since.
				return i.withLiveStored(ctx, f)
			}
			return err
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
		f.changed, f.changes = decision.DesiredChange(f.op, f.old, f.new)
	}
	return nil
}

// patchedMetadata is what a JSON patch or an apply makes of the stored
// child's cached metadata; when that depends on more than the metadata,
// the child is read whole.
func (i *Interceptor) patchedMetadata(ctx context.Context, f *facts) error {
	ns := f.namespace
	opts := patch.Options{Kind: f.kind, Name: f.req.w.info.Name, Namespace: &ns, SkipTypeCheck: true}
	if view, ok := patch.ApplyToMetadata(f.patchType, f.old, f.data, opts); ok {
		f.new = view.Object
		f.changed, f.changes = decision.DesiredChange(f.op, f.old, f.new)
		f.changed = f.changed || view.ChangesContent
		return nil
	}
	key := storedcopies.Key{Resource: f.req.w.gvr, Kind: f.kind, Namespace: f.namespace, Name: f.req.w.info.Name}
	if cp, ok := i.copies.At(key, f.old.GetResourceVersion()); ok {
		f.old, f.oldIsCopy, f.oldIsMetadata = cp, true, false
		return i.withEffectiveObject(ctx, f)
	}
	return i.withLiveStored(ctx, f)
}

// withLiveStored computes f's effective object again on the stored object
// read live, which it keeps as the copy of its version.
func (i *Interceptor) withLiveStored(ctx context.Context, f *facts) error {
	live, err := i.cfg.Objects.GetLive(ctx, f.req.w.gvr, f.namespace, f.req.w.info.Name)
	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", f.kind.Kind, cache.NewObjectName(f.namespace, f.req.w.info.Name).String(), err))
	default:
		key := storedcopies.Key{Resource: f.req.w.gvr, Kind: f.kind, Namespace: f.namespace, Name: f.req.w.info.Name}
		i.copies.PutObject(key, live)
	}
	f.old, f.childLive, f.oldIsMetadata, f.oldIsCopy = live, true, false, false
	return i.withEffectiveObject(ctx, f)
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

// podSpecPath is the part of a pod's spec a write to subresource changes.
func podSpecPath(subresource string) string {
	if subresource == "ephemeralcontainers" {
		return "spec.ephemeralContainers"
	}
	return "spec.containers[*].resources"
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
	case wr.sub == podSpecSubresource:
		// Decided as a change of the pod's spec, which no part of its
		// body or of the stored pod tells more of.
		return storedMetadata
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
	obj                      *unstructured.Unstructured
	live, metadataOnly, copy bool
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
			return i.storedVersion(ctx, f, rv, need == storedMetadata)
		}
	}
	return storedChild{obj: old, metadataOnly: need == storedMetadata}, nil
}

// storedVersion is the stored child for an update naming version rv, which
// the cache has not got: the copy of rv the proxy kept, else a live read,
// kept when the cache holds the kind's metadata only.
func (i *Interceptor) storedVersion(ctx context.Context, f *facts, rv string, keep bool) (storedChild, error) {
	wr := f.req.w
	key := storedcopies.Key{Resource: wr.gvr, Kind: f.kind, Namespace: f.namespace, Name: wr.info.Name}
	if cp, ok := i.copies.At(key, rv); ok {
		return storedChild{obj: cp, copy: true}, nil
	}
	old, err := i.cfg.Objects.GetLive(ctx, wr.gvr, f.namespace, wr.info.Name)
	if err == nil && keep {
		i.copies.PutObject(key, old)
	}
	return storedChild{obj: old, live: true}, err
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
	data, err = readUpTo(orig, limit+1, r.ContentLength)
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

// readUpTo reads at most n bytes of body. A body whose length is known
// is read into one buffer of that size: a whole object grown into from
// nothing costs a copy at every doubling.
func readUpTo(body io.Reader, n, length int64) ([]byte, error) {
	if length <= 0 || length >= n {
		return io.ReadAll(io.LimitReader(body, n))
	}
	buf := bytes.NewBuffer(make([]byte, 0, length+bytes.MinRead))
	_, err := buf.ReadFrom(io.LimitReader(body, n))
	return buf.Bytes(), err
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

// specReplicasPath is where the /scale of gvr writes. A resource without
// a scale subresource is kube-apiserver's 404.
func (i *Interceptor) specReplicasPath(ctx context.Context, gvr schema.GroupVersionResource) (string, error) {
	path, scalable, err := i.scalePaths.SpecReplicasPath(ctx, gvr)
	var unreadable *subresources.UnreadableError
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
