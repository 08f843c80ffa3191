package objects

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme" //nolint:depguard // the types of the built-in kinds, not a client
)

// A parent of a built-in kind (a Deployment, a StatefulSet) is watched in
// protobuf, decoded into its Go type and kept as the protobuf of its lean
// form: decoding a Deployment's JSON into a tree of maps and encoding the
// lean tree again was most of the CPU of its watch event, several times
// what its protobuf costs. It is made the tree a decision reads only when
// one is decided under it, or an observer learns from its kind.
//
// The tree is the one kube-apiserver's JSON decodes to only if the proxy's
// Go types know every field kube-apiserver sends: its JSON is an encoding
// of the same types, while decoding protobuf drops a field the types do
// not have. So kinds are watched in protobuf only from a kube-apiserver no
// newer than the API types the proxy is built with. An older one sends a
// subset of their fields, and an optional field the older one lacks is
// left out of the JSON of both (API conventions make every field added
// since optional and omitted when empty). Custom resources and kinds of
// aggregated API servers are watched in JSON.

// typedParentScheme knows the Go types of the built-in kinds.
var typedParentScheme = scheme.Scheme

// typedParentDecoder decodes a built-in kind's protobuf, or a Status.
var typedParentDecoder = protobuf.NewSerializer(typedParentScheme, typedParentScheme)

// protobufObject is the Go type of a built-in kind, with its generated
// protobuf encoding.
type protobufObject interface {
	runtime.Object
	Marshal() ([]byte, error)
	Unmarshal(data []byte) error
}

// typedParentKinds returns which kind of parent is watched in protobuf:
// kindFor maps a resource to its kind, and serverVersion is kube-apiserver's,
// read once, when the first resource is asked about. builtWith is the
// version of the API types the proxy is built with (k8s.io/api's module
// version, "v0.35.4").
func typedParentKinds(serverVersion func() (*version.Info, error), builtWith string,
	kindFor func(schema.GroupVersionResource) (schema.GroupVersionKind, error)) func(schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
	served := sync.OnceValue(func() bool {
		v, err := serverVersion()
		return err == nil && typesKnowEveryField(v, builtWith)
	})
	return func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
		if !served() {
			return schema.GroupVersionKind{}, false
		}
		gvk, err := kindFor(gvr)
		if err != nil || !typedParentScheme.Recognizes(gvk) {
			return schema.GroupVersionKind{}, false
		}
		obj, err := typedParentScheme.New(gvk)
		if _, ok := obj.(protobufObject); err != nil || !ok {
			return schema.GroupVersionKind{}, false
		}
		return gvk, true
	}
}

// typesKnowEveryField reports whether the API types of module version
// builtWith ("v0.35.4") know every field a kube-apiserver of version server
// sends: it is of Kubernetes 1.x with x no greater than the types' minor
// version. Providers append to the minor version ("35+").
func typesKnowEveryField(server *version.Info, builtWith string) bool {
	if server == nil || server.Major != "1" {
		return false
	}
	serverMinor, ok := leadingNumber(server.Minor)
	if !ok {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(builtWith, "v"), ".")
	if len(parts) < 2 || parts[0] != "0" {
		return false
	}
	typesMinor, ok := leadingNumber(parts[1])
	return ok && serverMinor <= typesMinor
}

func leadingNumber(s string) (int, bool) {
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(s[:end])
	return n, err == nil
}

// apiTypesVersion is the module version of k8s.io/api the proxy is built
// with (go.mod's, which a test holds it to): a test binary's build
// information lists no modules.
const apiTypesVersion = "v0.35.4"

// compactTypedParent is compactParentOf of obj, a parent decoded into its
// Go type: the same lean form (LeanParent), kept as protobuf. A bookmark
// keeps its annotations (keepAnnotations): the reflector reads the end of
// a watch list's initial events from them.
func compactTypedParent(obj runtime.Object, gvk schema.GroupVersionKind, keepAnnotations bool) (*compactParent, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	m.SetManagedFields(leanManagedFields(m.GetManagedFields()))
	pm, ok := obj.(protobufObject)
	if !ok {
		return nil, fmt.Errorf("%s has no protobuf encoding", gvk)
	}
	data, err := pm.Marshal()
	if err != nil {
		return nil, fmt.Errorf("keeping %s %s/%s as protobuf: %w", gvk.Kind, m.GetNamespace(), m.GetName(), err)
	}
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	p := &compactParent{apiVersion: apiVersion, kind: kind, namespace: m.GetNamespace(), name: m.GetName(),
		uid: string(m.GetUID()), resourceVersion: m.GetResourceVersion(), generation: m.GetGeneration(), protobuf: data}
	if keepAnnotations {
		p.bookmarkAnnotations = m.GetAnnotations()
	}
	return p, nil
}

// observedGenerationOwned is what LeanParent leaves of a managedFields
// entry that owns status.observedGeneration.
var observedGenerationOwned = []byte(`{"f:status":{"f:observedGeneration":{}}}`)

// leanManagedFields is LeanParent's managedFields of a typed object: the
// entries that own status.observedGeneration, with only that field.
func leanManagedFields(entries []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var kept []metav1.ManagedFieldsEntry
	for _, e := range entries {
		if !ownsObservedGeneration(e.FieldsV1) {
			continue
		}
		e.FieldsV1 = &metav1.FieldsV1{Raw: observedGenerationOwned}
		kept = append(kept, e)
	}
	return kept
}

// ownsObservedGeneration reports whether f has status.observedGeneration:
// a condition's observedGeneration is deeper down. A field manager's set
// is mostly the same for every object of a kind it writes, and parsing it
// was a large share of a parent's event: answers are remembered.
func ownsObservedGeneration(f *metav1.FieldsV1) bool {
	if f == nil || !bytes.Contains(f.Raw, []byte(`"f:observedGeneration"`)) {
		return false
	}
	observedGenerationOwnersMu.Lock()
	owns, known := observedGenerationOwners[string(f.Raw)]
	observedGenerationOwnersMu.Unlock()
	if known {
		return owns
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(f.Raw, &fields) == nil {
		var status map[string]json.RawMessage
		if json.Unmarshal(fields["f:status"], &status) == nil {
			_, owns = status["f:observedGeneration"]
		}
	}
	if len(f.Raw) > maxRememberedFieldSet {
		return owns
	}
	observedGenerationOwnersMu.Lock()
	if len(observedGenerationOwners) >= maxObservedGenerationOwners {
		clear(observedGenerationOwners)
	}
	observedGenerationOwners[string(f.Raw)] = owns
	observedGenerationOwnersMu.Unlock()
	return owns
}

// maxObservedGenerationOwners bounds the field sets whose answer is
// remembered, and maxRememberedFieldSet the size of one: 4 MiB at most.
const (
	maxObservedGenerationOwners = 512
	maxRememberedFieldSet       = 8 * 1024
)

var (
	observedGenerationOwnersMu sync.Mutex
	observedGenerationOwners   = map[string]bool{}
)

// typedParentObject decodes the protobuf of a parent of kind gvk into the
// tree a decision reads: what decoding kube-apiserver's JSON of it gives.
func typedParentObject(gvk schema.GroupVersionKind, data []byte) (*unstructured.Unstructured, error) {
	obj, err := typedParentScheme.New(gvk)
	if err != nil {
		return nil, err
	}
	pm, ok := obj.(protobufObject)
	if !ok {
		return nil, fmt.Errorf("%s has no protobuf encoding", gvk)
	}
	if err := pm.Unmarshal(data); err != nil {
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return typedTree(obj)
}

// typedTree is obj, in its Go type with its kind set, as the tree its
// JSON decodes to.
func typedTree(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// typedStatusKey stands for everything settledness reads of obj, a parent
// in its Go type, but its spec (which its generation stands for): its
// generation, deletion, annotations and status, the status as protobuf
// (whose encoding of a map is ordered). "" when obj has no status.
func typedStatusKey(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return ""
	}
	status := v.Elem().FieldByName("Status")
	if !status.IsValid() || !status.CanAddr() {
		return ""
	}
	marshaler, ok := status.Addr().Interface().(interface{ Marshal() ([]byte, error) })
	if !ok {
		return ""
	}
	data, err := marshaler.Marshal()
	if err != nil {
		return ""
	}
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(m.GetGeneration())) //nolint:gosec // the bits, not the number
	h.Write(n[:])
	if t := m.GetDeletionTimestamp(); t != nil {
		h.Write([]byte(t.UTC().Format(time.RFC3339)))
	}
	h.Write([]byte{0})
	annotations := m.GetAnnotations()
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(annotations[k]))
		h.Write([]byte{0})
	}
	h.Write([]byte{0xff})
	h.Write(data)
	return string(h.Sum(nil))
}

// withoutPodTemplates is a copy of obj, a parent in its Go type, without
// its pod templates (and a StatefulSet's claim templates): most of a
// workload's spec, which nothing that reads its status (kstatus, the
// observed generations) looks at. The copy shares the rest with obj. A
// kind without templates is obj itself.
func withoutPodTemplates(obj runtime.Object) runtime.Object {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		c := *o
		c.Spec.Template = corev1.PodTemplateSpec{}
		return &c
	case *appsv1.ReplicaSet:
		c := *o
		c.Spec.Template = corev1.PodTemplateSpec{}
		return &c
	case *appsv1.StatefulSet:
		c := *o
		c.Spec.Template = corev1.PodTemplateSpec{}
		c.Spec.VolumeClaimTemplates = nil
		return &c
	case *appsv1.DaemonSet:
		c := *o
		c.Spec.Template = corev1.PodTemplateSpec{}
		return &c
	case *batchv1.Job:
		c := *o
		c.Spec.Template = corev1.PodTemplateSpec{}
		return &c
	case *batchv1.CronJob:
		c := *o
		c.Spec.JobTemplate = batchv1.JobTemplateSpec{}
		return &c
	case *corev1.ReplicationController:
		c := *o
		c.Spec.Template = nil
		return &c
	}
	return obj
}

// typedParentEvents reads the events of a protobuf watch of the parents
// of kind gvk: each frame an event, whose object is decoded into its type
// and made the compactParent its cache keeps (an error's Status as it
// comes, for the reflector).
type typedParentEvents struct {
	body   io.Closer
	frames streaming.Decoder
	gvk    schema.GroupVersionKind
	// last is the last parent decoded, lean, and its compactParent.
	last        runtime.Object
	lastCompact *compactParent
}

func newTypedParentEvents(body io.ReadCloser, gvk schema.GroupVersionKind) *typedParentEvents {
	frames := streaming.NewDecoder(protobuf.LengthDelimitedFramer.NewFrameReader(body), watchEventSerializer{})
	return &typedParentEvents{body: body, frames: frames, gvk: gvk}
}

func (d *typedParentEvents) Decode() (watch.EventType, runtime.Object, error) {
	var event metav1.WatchEvent
	if _, _, err := d.frames.Decode(nil, &event); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF || errors.Is(err, streaming.ErrObjectTooLarge) {
			return "", nil, err
		}
		return "", nil, fmt.Errorf("decoding a watch event of a parent: %w", err)
	}
	typ := watch.EventType(event.Type)
	switch typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error:
	default:
		return "", nil, fmt.Errorf("a watch event of a parent of unknown type %q", event.Type)
	}
	obj, gvk, err := typedParentDecoder.Decode(event.Object.Raw, nil, nil)
	if err != nil {
		return "", nil, fmt.Errorf("decoding a %s watch event of a parent: %w", typ, err)
	}
	if typ == watch.Error {
		return typ, obj, nil
	}
	if *gvk != d.gvk {
		return "", nil, fmt.Errorf("a watch of %s sent a %s", d.gvk.Kind, gvk)
	}
	p, err := compactTypedParent(obj, *gvk, typ == watch.Bookmark)
	if err != nil {
		return "", nil, err
	}
	d.last, d.lastCompact = obj, p
	return typ, p, nil
}

// decoded is the lean parent the last event decoded, in its Go type, if
// obj is that event's compactParent.
func (d *typedParentEvents) decoded(obj runtime.Object) *watchDecoded {
	if d.lastCompact == nil || runtime.Object(d.lastCompact) != obj {
		return nil
	}
	return &watchDecoded{typed: d.last}
}

func (d *typedParentEvents) Close() { _ = d.body.Close() }

// typedParentMediaType asks for a built-in kind's objects in protobuf.
const typedParentMediaType = runtime.ContentTypeProtobuf

// openTypedParentWatch opens the watch of the parents of gvr, of the
// built-in kind gvk, that selector selects: in protobuf, each decoded
// into gvk's Go type and made compact. It goes over the client of the
// watches of children, which reads a refusal's Status in protobuf.
func (s *Store) openTypedParentWatch(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, selector *exclusionSelector) openWatch {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Decoder, error) {
		opts.FieldSelector = selector.get()
		body, err := s.childWatch.Get().AbsPath(resourcePath(gvr)...).
			SetHeader("Accept", typedParentMediaType).
			VersionedParams(&opts, metav1.ParameterCodec).
			Stream(ctx)
		selector.refusedBy(ctx, err)
		if err != nil {
			return nil, err
		}
		return newTypedParentEvents(body, gvk), nil
	}
}
