package objects

import (
	"context"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	kjson "sigs.k8s.io/json"
)

// A watch of parents decodes each event in one pass, envelope and object
// together, as util/json decodes an unstructured object (case-sensitive,
// integers as int64), and makes it the compactParent its cache keeps. The
// dynamic client's watch read every event four times before its object
// was decoded: the envelope's kind, the envelope, the object's kind, and
// the check that it is JSON; that was most of a parent's event.

// parentStatusScheme decodes the one kind a watch request of parents
// answers with other than events: a Status, when it is refused.
var parentStatusScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

// parentWatchClient is the REST client of the watches of parents, on the
// HTTP client of the caches.
func parentWatchClient(cfg *rest.Config, client *http.Client) (rest.Interface, error) {
	c := dynamic.ConfigFor(cfg)
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(parentStatusScheme).WithoutConversion()
	// Options are sent as query parameters, versioned as meta/v1's.
	c.GroupVersion = &metav1.SchemeGroupVersion
	c.APIPath = "/never-sent"
	return rest.RESTClientForConfigAndClient(c, client)
}

// watchParents is the watch of the parents of gvr in every namespace,
// each event decoded by parentEventDecoder.
func (s *Store) watchParents(gvr schema.GroupVersionResource) func(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.Watch = true
		body, err := s.parentWatch.Get().AbsPath(resourcePath(gvr)...).
			SetHeader("Accept", runtime.ContentTypeJSON).
			VersionedParams(&opts, metav1.ParameterCodec).
			Stream(ctx)
		if err != nil {
			// As a watch request of client-go: a connection that broke
			// before the response is a watch that ended, not a failure.
			if utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) {
				return watch.NewEmptyWatch(), nil
			}
			return nil, err
		}
		return watch.NewStreamWatcherWithLogger(klog.FromContext(ctx), newParentEventDecoder(body),
			apierrors.NewClientErrorReporter(http.StatusInternalServerError, "GET", "ClientWatchDecoding")), nil
	}
}

// parentEventDecoder reads the events of a watch of parents.
type parentEventDecoder struct {
	frames streaming.Decoder
}

// newParentEventDecoder reads the events of a watch of parents from
// body, framed as any JSON watch is.
func newParentEventDecoder(body io.ReadCloser) *parentEventDecoder {
	return &parentEventDecoder{frames: streaming.NewDecoder(json.Framer.NewFrameReader(body), parentEventCodec{})}
}

func (d *parentEventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	obj, _, err := d.frames.Decode(nil, nil)
	if err != nil {
		return "", nil, err
	}
	e, ok := obj.(*parentEvent)
	if !ok {
		return "", nil, fmt.Errorf("a watch of parents decoded a %T", obj)
	}
	return e.typ, e.object, nil
}

func (d *parentEventDecoder) Close() { _ = d.frames.Close() }

// parentEvent is one decoded event of a watch of parents: it never
// leaves parentEventDecoder.
type parentEvent struct {
	metav1.TypeMeta
	typ    watch.EventType
	object runtime.Object
}

func (e *parentEvent) DeepCopyObject() runtime.Object {
	out := *e
	return &out
}

// parentEventCodec decodes the frame of one event of a watch of parents.
type parentEventCodec struct{}

var _ runtime.Decoder = parentEventCodec{}

func (parentEventCodec) Decode(data []byte, _ *schema.GroupVersionKind, _ runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	var event struct {
		Type   watch.EventType        `json:"type"`
		Object map[string]interface{} `json:"object"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &event); err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a parent: %w", err)
	}
	switch event.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error:
	default:
		return nil, nil, fmt.Errorf("a watch event of a parent of unknown type %q", event.Type)
	}
	if event.Object == nil {
		return nil, nil, fmt.Errorf("a %s watch event of a parent without its object", event.Type)
	}
	u := &unstructured.Unstructured{Object: event.Object}
	if u.GetKind() == "" {
		return nil, nil, fmt.Errorf("a %s watch event of a parent: the object's kind is missing", event.Type)
	}
	var object runtime.Object = u
	if event.Type != watch.Error {
		// An error's Status is read by the reflector as it comes.
		var annotations map[string]string
		if event.Type == watch.Bookmark {
			// The end of a watch list's initial events is told by an
			// annotation of its bookmark.
			annotations = u.GetAnnotations()
		}
		out, err := compactParentOf(u)
		if err != nil {
			return nil, nil, err
		}
		p := out.(*compactParent)
		p.bookmarkAnnotations = annotations
		object = p
	}
	return &parentEvent{typ: event.Type, object: object}, nil, nil
}

// newParentInformer is the informer of a cache of parents. Over the
// caches' own connections (CachesOver), its watch decodes each event in
// one pass (parentEventCodec); a list is decoded by the dynamic client,
// and its parents made compact by the informer's transform.
func (s *Store) newParentInformer(gvr schema.GroupVersionResource) informers.GenericInformer {
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	client := s.cacheDynamic.Resource(gvr)
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.List(ctx, opts)
		},
		WatchFuncWithContext: s.watchParents(gvr),
	}, s.cacheDynamic)
	// The reflector drops a watched object of another type than the
	// example's.
	inf := cache.NewSharedIndexInformerWithOptions(lw, &compactParent{}, cache.SharedIndexInformerOptions{
		ResyncPeriod: s.resync, Indexers: indexers, ObjectDescription: gvr.String(),
	})
	return &parentInformer{informer: inf, gvr: gvr}
}

// parentInformer is a cache of parents as a generic informer.
type parentInformer struct {
	informer cache.SharedIndexInformer
	gvr      schema.GroupVersionResource
}

func (i *parentInformer) Informer() cache.SharedIndexInformer { return i.informer }

func (i *parentInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(i.informer.GetIndexer(), i.gvr.GroupResource())
}
