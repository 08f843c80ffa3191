package objects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// A parent of a built-in kind (a Deployment, a DaemonSet) is watched in
// protobuf and kept as the protobuf of its lean form (parentprotobuf.go):
// decoding a Deployment's JSON into a tree of maps and encoding the lean
// tree again was most of the CPU of its watch event, several times what
// its protobuf costs. It is decoded into its Go type, and made the tree a
// decision reads, only when one is decided under it or the settledness
// memory needs it.
//
// The tree is the one kube-apiserver's JSON decodes to only if the proxy's
// Go types encode every field as kube-apiserver does: its JSON is an
// encoding of its own types, while decoding protobuf drops a field the
// proxy's types do not have, and ToUnstructured renders a field with the
// proxy's JSON tags. Both change between minor versions: a newer
// kube-apiserver sends fields the types lack, and an older one may tag a
// field differently (before 1.34 an empty creationTimestamp went into the
// JSON as null, so every pod template's metadata had one, which the
// types since leave out). Either would make one spec hash two ways, from
// the cache and from a live read. So kinds are watched in protobuf only
// from a kube-apiserver of the minor version of the API types the proxy
// is built with. Custom resources and kinds of aggregated API servers are
// watched in JSON.

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

// typedParentKind reports whether the parents of gvr are of a built-in
// kind that can be watched in protobuf, and which: kindFor maps a
// resource to its kind.
func typedParentKind(kindFor func(schema.GroupVersionResource) (schema.GroupVersionKind, error), gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
	gvk, err := kindFor(gvr)
	if err != nil || !typedParentScheme.Recognizes(gvk) {
		return schema.GroupVersionKind{}, false
	}
	obj, err := typedParentScheme.New(gvk)
	if _, ok := obj.(protobufObject); err != nil || !ok || embedsTypeMeta(reflect.TypeOf(obj).Elem(), map[reflect.Type]bool{}) {
		return schema.GroupVersionKind{}, false
	}
	return gvk, true
}

// serverVersionRecheck is how long kube-apiserver's version is taken as
// read. An upgrade ends every watch, and the watches opened after it must
// read the new version: the read is taken again for each watch opened
// later than this, and one read serves the watches that a restart of
// kube-apiserver has reopened together.
const serverVersionRecheck = 5 * time.Second

// protobufServed returns whether kube-apiserver is of the minor version of
// the API types of version builtWith (k8s.io/api's module version,
// "v0.35.4"), reading its version (serverVersion) at most once per
// serverVersionRecheck by the clock now. A version it cannot read (while
// kube-apiserver restarts) counts as another, and is read again when next
// asked.
func protobufServed(serverVersion func() (*version.Info, error), builtWith string, now func() time.Time) func() bool {
	var mu sync.Mutex
	var readAt time.Time
	var served bool
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if t := now(); readAt.IsZero() || t.Sub(readAt) >= serverVersionRecheck {
			v, err := serverVersion()
			if err != nil {
				readAt, served = time.Time{}, false
				return false
			}
			served, readAt = encodesAsTheTypes(v, builtWith), t
		}
		return served
	}
}

// typeMetaType is the Go type of an object's apiVersion and kind.
var typeMetaType = reflect.TypeFor[metav1.TypeMeta]()

// embedsTypeMeta reports whether t holds, below its own, an object with
// apiVersion and kind (a StatefulSet's claim templates): protobuf encodes
// no object's apiVersion and kind, but kube-apiserver's JSON has the ones
// it defaults on such an object, so its protobuf would not give the tree
// its JSON does.
func embedsTypeMeta(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return embedsTypeMeta(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Type == typeMetaType {
				if len(seen) > 1 {
					return true
				}
				continue
			}
			if embedsTypeMeta(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// encodesAsTheTypes reports whether a kube-apiserver of version server
// encodes the fields of the API types of module version builtWith
// ("v0.35.4") as they do: it is of Kubernetes 1.x with x the types' minor
// version. Providers append to the minor version ("35+").
func encodesAsTheTypes(server *version.Info, builtWith string) bool {
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
	return ok && serverMinor == typesMinor
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

// observedGenerationOwned is what LeanParent leaves of a managedFields
// entry that owns status.observedGeneration.
var observedGenerationOwned = []byte(`{"f:status":{"f:observedGeneration":{}}}`)

// ownsObservedGeneration reports whether f has status.observedGeneration:
// a condition's observedGeneration is deeper down. A field manager's set
// is mostly the same for every object of a kind it writes, and parsing it
// was a large share of a parent's event: answers are remembered.
func ownsObservedGeneration(raw []byte) bool {
	if !bytes.Contains(raw, []byte(`"f:observedGeneration"`)) {
		return false
	}
	observedGenerationOwnersMu.Lock()
	owns, known := observedGenerationOwners[string(raw)]
	observedGenerationOwnersMu.Unlock()
	if known {
		return owns
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) == nil {
		var status map[string]json.RawMessage
		if json.Unmarshal(fields["f:status"], &status) == nil {
			_, owns = status["f:observedGeneration"]
		}
	}
	if len(raw) > maxRememberedFieldSet {
		return owns
	}
	observedGenerationOwnersMu.Lock()
	if len(observedGenerationOwners) >= maxObservedGenerationOwners {
		clear(observedGenerationOwners)
	}
	observedGenerationOwners[string(raw)] = owns
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
	obj, err := typedParent(gvk, data)
	if err != nil {
		return nil, err
	}
	return typedTree(obj)
}

// typedParent decodes the protobuf of a parent of kind gvk into its Go
// type.
func typedParent(gvk schema.GroupVersionKind, data []byte) (runtime.Object, error) {
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
	return obj, nil
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

// withoutPodTemplates is a copy of obj, a parent in its Go type, without
// its pod templates (StatefulSets are watched in JSON): most of a
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
	// last is the last parent decoded, lean, and lastCompact its
	// compactParent.
	last        *watchDecoded
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
	object, kind, err := unknownObject(event.Object.Raw)
	if err != nil {
		return "", nil, fmt.Errorf("decoding a %s watch event of a parent: %w", typ, err)
	}
	if typ == watch.Error || kind.Kind == "Status" {
		// A Status: the reflector reads it as it comes.
		obj, _, err := typedParentDecoder.Decode(event.Object.Raw, nil, nil)
		if err != nil {
			return "", nil, fmt.Errorf("decoding a %s watch event of a parent: %w", typ, err)
		}
		return typ, obj, nil
	}
	if kind != d.gvk {
		return "", nil, fmt.Errorf("a watch of %s sent a %s", d.gvk.Kind, kind)
	}
	p, decoded, err := compactProtobufParent(object, kind, typ == watch.Bookmark)
	if err != nil {
		return "", nil, fmt.Errorf("decoding a %s watch event of a parent: %w", typ, err)
	}
	d.last, d.lastCompact = decoded, p
	return typ, p, nil
}

// compactProtobufParent is compactParentOf of the parent of kind gvk whose
// protobuf is object, and the parent for the observers. A bookmark keeps
// its annotations (withAnnotations): the reflector reads the end of a
// watch list's initial events from them.
func compactProtobufParent(object []byte, gvk schema.GroupVersionKind, withAnnotations bool) (*compactParent, *watchDecoded, error) {
	lean, err := leanParentProtobuf(object, withAnnotations)
	if err != nil {
		return nil, nil, err
	}
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	p := &compactParent{apiVersion: apiVersion, kind: kind, namespace: lean.namespace, name: lean.name, uid: lean.uid,
		resourceVersion: lean.resourceVersion, generation: lean.generation, protobuf: lean.object,
		bookmarkAnnotations: lean.annotations}
	return p, &watchDecoded{protobuf: lean.object, gvk: gvk, key: lean.statusKey}, nil
}

// unknownObject is the object of the runtime.Unknown whose protobuf is
// data, and its kind.
func unknownObject(data []byte) ([]byte, schema.GroupVersionKind, error) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return nil, schema.GroupVersionKind{}, errors.New("the object is not protobuf")
	}
	envelope := data[len(protobufPrefix):]
	encoding, err := bytesField(envelope, unknownContentEncoding)
	if err != nil {
		return nil, schema.GroupVersionKind{}, err
	}
	if len(encoding) > 0 {
		return nil, schema.GroupVersionKind{}, fmt.Errorf("the object has content encoding %q", encoding)
	}
	typeMeta, err := bytesField(envelope, unknownTypeMeta)
	if err != nil {
		return nil, schema.GroupVersionKind{}, err
	}
	apiVersion, err := bytesField(typeMeta, typeMetaAPIVersion)
	if err != nil {
		return nil, schema.GroupVersionKind{}, err
	}
	kind, err := bytesField(typeMeta, typeMetaKind)
	if err != nil {
		return nil, schema.GroupVersionKind{}, err
	}
	object, err := bytesField(envelope, unknownRaw)
	if err != nil {
		return nil, schema.GroupVersionKind{}, err
	}
	return object, schema.FromAPIVersionAndKind(string(apiVersion), string(kind)), nil
}

// decoded is the lean parent the last event decoded, in its Go type, if
// obj is that event's compactParent.
func (d *typedParentEvents) decoded(obj runtime.Object) *watchDecoded {
	if d.lastCompact == nil || runtime.Object(d.lastCompact) != obj {
		return nil
	}
	return d.last
}

func (d *typedParentEvents) Close() { _ = d.body.Close() }

// typedParentMediaType asks for a built-in kind's objects in protobuf.
const typedParentMediaType = runtime.ContentTypeProtobuf

// openTypedParentWatch opens the watch of the parents of gvr, of the
// built-in kind gvk, that selector selects: in protobuf, each decoded
// into gvk's Go type and made compact, while kube-apiserver is of the
// minor version of the proxy's API types; in JSON (openParentWatch)
// otherwise. It
// goes over the client of the watches of children, which reads a
// refusal's Status in protobuf.
func (s *Store) openTypedParentWatch(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, selector *exclusionSelector) openWatch {
	inJSON := s.openParentWatch(gvr, selector)
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Decoder, error) {
		if !s.protobufServed() {
			return inJSON(ctx, opts)
		}
		body, err := openWatchStream(ctx, s.childWatch, gvr, typedParentMediaType, selector, opts)
		if err != nil {
			return nil, err
		}
		return newTypedParentEvents(body, gvk), nil
	}
}
