package objects

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"
	"k8s.io/klog/v2"
)

// openWatch opens one watch of a cache and returns its events, or a
// watch that ended before it began.
type openWatch func(ctx context.Context, opts metav1.ListOptions) (events watch.Decoder, err error)

// watchIntoStore is the watch of a cache whose store is store: each
// change is written into the store by the goroutine that reads it off
// the connection (storeWritingDecoder), and the reflector gets only what
// it must see. Handing each event to the reflector's goroutine woke a
// thread of the otherwise idle proxy for every event: as much CPU as the
// rest of the event's work.
func watchIntoStore(store listingStore, open openWatch) func(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.Watch = true
		replaced := store.replaces()
		events, err := open(ctx, opts)
		if err != nil {
			// As a watch request of client-go: a connection that broke
			// before the response is a watch that ended, not a failure.
			if utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) {
				return watch.NewEmptyWatch(), nil
			}
			return nil, err
		}
		initialEvents := opts.SendInitialEvents != nil && *opts.SendInitialEvents
		d := &storeWritingDecoder{events: events, store: store, writing: !initialEvents, replacedBefore: replaced,
			stopped: make(chan struct{}), done: ctx.Done()}
		return watch.NewStreamWatcherWithLogger(klog.FromContext(ctx), d,
			apierrors.NewClientErrorReporter(http.StatusInternalServerError, "GET", "ClientWatchDecoding")), nil
	}
}

// openWatchStream opens the watch of the objects of gvr that selector
// selects over client, asking for mediaType, and returns its body.
func openWatchStream(ctx context.Context, client rest.Interface, gvr schema.GroupVersionResource, mediaType string,
	selector *exclusionSelector, opts metav1.ListOptions) (io.ReadCloser, error) {
	opts.FieldSelector = selector.get()
	body, err := client.Get().AbsPath(resourcePath(gvr)...).
		SetHeader("Accept", mediaType).
		VersionedParams(&opts, metav1.ParameterCodec).
		Stream(ctx)
	selector.refusedBy(ctx, err)
	return body, err
}

// openChildWatch opens the watch of the children of gvr that selector
// selects, in protobuf, each child decoded as the compactChild its cache
// keeps.
func (s *Store) openChildWatch(gvr schema.GroupVersionResource, selector *exclusionSelector) openWatch {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Decoder, error) {
		body, err := openWatchStream(ctx, s.childWatch, gvr, childWatchMediaType, selector, opts)
		if err != nil {
			return nil, err
		}
		var framer runtime.Framer
		for _, info := range (childWatchCodecs{}).SupportedMediaTypes() {
			framer = info.StreamSerializer.Framer
		}
		if framer == nil {
			_ = body.Close()
			return nil, fmt.Errorf("no protobuf framing of watch events for the watch of %s", gvr)
		}
		return restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(body), watchEventSerializer{}), childWatchSerializer{}), nil
	}
}

// decodingWatch is a watch whose events are decoded whole before they
// are made compact (a watch of parents): the observers that read the whole
// object are given it as decoded, not decoded again.
type decodingWatch interface {
	// decoded is obj, the last object the watch decoded, as decoded; nil
	// for any other.
	decoded(obj runtime.Object) *watchDecoded
}

// watchDecoded is a parent as its watch decoded it: the lean tree (a JSON
// watch's), or the lean object's protobuf (a protobuf watch's), decoded
// into its Go type only when asked.
type watchDecoded struct {
	tree *unstructured.Unstructured

	protobuf []byte
	gvk      schema.GroupVersionKind
	key      string
	typed    runtime.Object
}

// typedObject is the parent in its Go type.
func (d *watchDecoded) typedObject() (runtime.Object, error) {
	if d.typed == nil {
		obj, err := typedParent(d.gvk, d.protobuf)
		if err != nil {
			return nil, err
		}
		d.typed = obj
	}
	return d.typed, nil
}

// whole is the parent as the tree its JSON decodes to.
func (d *watchDecoded) whole() (*unstructured.Unstructured, error) {
	if d.tree == nil && d.protobuf != nil {
		obj, err := d.typedObject()
		if err != nil {
			return nil, err
		}
		u, err := typedTree(obj)
		if err != nil {
			return nil, err
		}
		d.tree = u
	}
	return d.tree, nil
}

// statusKey is leanProtobuf's of a parent watched in protobuf; "" for a
// tree.
func (d *watchDecoded) statusKey() string { return d.key }

// status is the parent as a tree, its pod templates left out when it was
// watched in protobuf (withoutPodTemplates).
func (d *watchDecoded) status() (*unstructured.Unstructured, error) {
	if d.tree != nil || d.protobuf == nil {
		return d.whole()
	}
	obj, err := d.typedObject()
	if err != nil {
		return nil, err
	}
	return typedTree(withoutPodTemplates(obj))
}

// storeWritingDecoder decodes a watch of a cache and writes each added,
// changed or deleted object into the cache's store itself. The reflector
// is handed the rest: bookmarks, errors, the end of the watch; and the
// initial events of a watch list, which it gathers into a store of its own
// and then replaces the cache's with: writing starts once it has, so no
// change is overwritten by the older list. Before it is handed anything
// else, it is handed again the last change written here (writing it again
// changes nothing), so that it resumes the watch from there, as it would
// have had it been handed every change.
type storeWritingDecoder struct {
	events watch.Decoder
	store  listingStore
	// writing: changes are written here, not handed on.
	writing bool
	// awaitingList: the initial events have been handed on, and writing
	// starts once the store has been replaced more often than
	// replacedBefore, when the watch was opened.
	awaitingList   bool
	replacedBefore uint64

	written *watchEvent
	held    *watchEvent

	stopOnce sync.Once
	stopped  chan struct{}
	done     <-chan struct{}
}

type watchEvent struct {
	typ watch.EventType
	obj runtime.Object
	err error
}

func (d *storeWritingDecoder) Decode() (watch.EventType, runtime.Object, error) {
	if h := d.held; h != nil {
		d.held = nil
		return h.typ, h.obj, h.err
	}
	if d.awaitingList {
		select {
		case <-d.store.replacedSince(d.replacedBefore):
		case <-d.stopped:
			return "", nil, io.EOF
		case <-d.done:
			return "", nil, io.EOF
		}
		d.awaitingList, d.writing = false, true
	}
	for {
		typ, obj, err := d.events.Decode()
		if err == nil && d.writing {
			if c, ok := obj.(cachedObject); ok && (typ == watch.Added || typ == watch.Modified || typ == watch.Deleted) {
				d.write(typ, c)
				continue
			}
		}
		if err == nil && !d.writing && typ == watch.Bookmark {
			if m, err := meta.Accessor(obj); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				d.awaitingList = true
			}
		}
		e := &watchEvent{typ: typ, obj: obj, err: err}
		if w := d.written; w != nil {
			d.written = nil
			// A bookmark is newer than the change: the reflector resumes
			// from it.
			if err != nil || typ != watch.Bookmark {
				d.held = e
				return w.typ, w.obj, nil
			}
		}
		return e.typ, e.obj, e.err
	}
}

func (d *storeWritingDecoder) write(typ watch.EventType, c cachedObject) {
	var err error
	if typ == watch.Deleted {
		err = d.store.Delete(c)
	} else {
		var decoded *watchDecoded
		if w, ok := d.events.(decodingWatch); ok {
			decoded = w.decoded(c)
		}
		err = d.store.updateDecoded(c, decoded)
	}
	if err != nil {
		namespace, name, _ := c.identity()
		utilruntime.HandleError(fmt.Errorf("writing a watch event of %s/%s into the cache of %s: %w", namespace, name, d.store.kind.what, err))
	}
	if d.written == nil {
		d.written = &watchEvent{}
	}
	d.written.typ, d.written.obj = typ, c
}

func (d *storeWritingDecoder) Close() {
	d.stopOnce.Do(func() { close(d.stopped) })
	d.events.Close()
}
