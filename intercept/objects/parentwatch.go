package objects

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	kjson "sigs.k8s.io/json"
)

// A watch of parents decodes each event as it reads it off the connection,
// envelope and object together, as util/json decodes an unstructured
// object (case-sensitive, integers as int64), and makes it the
// compactParent its cache keeps. The dynamic client's watch read every
// event five times over before its object was decoded: to find where it
// ends, for the envelope's kind, the envelope, the object's kind, and a
// check that it is JSON; that was most of a parent's event.

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

// openParentWatch opens the watch of the parents of gvr that selector
// selects, each event decoded by parentEventDecoder.
func (s *Store) openParentWatch(gvr schema.GroupVersionResource, selector *exclusionSelector) openWatch {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Decoder, error) {
		body, err := openWatchStream(ctx, s.parentWatch, gvr, runtime.ContentTypeJSON, selector, opts)
		if err != nil {
			return nil, err
		}
		return newParentEventDecoder(body), nil
	}
}

// parentEventDecoder reads the events of a watch of parents off the
// connection, each decoded as it is read: finding where an event ends
// first, and then decoding it, read each event three times over.
type parentEventDecoder struct {
	body   io.Closer
	read   *eventBound
	events kjson.Decoder
	// max bounds one event (maxParentEvent).
	max int64
	// last is the last event decoded.
	last *parentEvent
}

// maxParentEvent bounds one event of a watch of parents, as client-go's
// watches bound a frame: kube-apiserver stores no object near it.
const maxParentEvent = 16 * 1024 * 1024

// newParentEventDecoder reads the events of a watch of parents from body.
func newParentEventDecoder(body io.ReadCloser) *parentEventDecoder {
	read := &eventBound{r: body, limit: maxParentEvent}
	return &parentEventDecoder{body: body, read: read, events: kjson.NewDecoderCaseSensitivePreserveInts(read), max: maxParentEvent}
}

func (d *parentEventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	d.read.limit = d.events.InputOffset() + d.max
	var event parentEventJSON
	if err := d.events.Decode(&event); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF || errors.Is(err, errEventTooLarge) {
			return "", nil, err
		}
		return "", nil, fmt.Errorf("decoding a watch event of a parent: %w", err)
	}
	e, err := parentEventOf(event)
	if err != nil {
		return "", nil, err
	}
	d.last = e
	return e.typ, e.object, nil
}

var errEventTooLarge = errors.New("a watch event of a parent is larger than the proxy reads")

// eventBound reads from r no further than limit bytes from the start of
// the stream.
type eventBound struct {
	r           io.Reader
	read, limit int64
}

func (b *eventBound) Read(p []byte) (int, error) {
	if b.read >= b.limit {
		return 0, errEventTooLarge
	}
	if rest := b.limit - b.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
}

// decoded is the lean object the last event decoded, if obj is that
// event's compactParent. It is what decoding the compactParent's JSON
// would give: kube-apiserver's JSON is an encoding of such an object.
func (d *parentEventDecoder) decoded(obj runtime.Object) *watchDecoded {
	if d.last == nil || d.last.object != obj || d.last.decoded == nil {
		return nil
	}
	return &watchDecoded{tree: d.last.decoded}
}

func (d *parentEventDecoder) Close() { _ = d.body.Close() }

// parentEvent is one decoded event of a watch of parents: it never
// leaves parentEventDecoder.
type parentEvent struct {
	typ    watch.EventType
	object runtime.Object
	// decoded is the lean object of an added or changed parent.
	decoded *unstructured.Unstructured
}

// parentEventJSON is a watch event of a parent as JSON has it.
type parentEventJSON struct {
	Type   watch.EventType        `json:"type"`
	Object map[string]interface{} `json:"object"`
}

// parentEventOf is the event of a parent event holds: its object made the
// compactParent its cache keeps (an error's Status as it comes, for the
// reflector).
func parentEventOf(event parentEventJSON) (*parentEvent, error) {
	switch event.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error:
	default:
		return nil, fmt.Errorf("a watch event of a parent of unknown type %q", event.Type)
	}
	if event.Object == nil {
		return nil, fmt.Errorf("a %s watch event of a parent without its object", event.Type)
	}
	u := &unstructured.Unstructured{Object: event.Object}
	if u.GetKind() == "" {
		return nil, fmt.Errorf("a %s watch event of a parent: the object's kind is missing", event.Type)
	}
	e := &parentEvent{typ: event.Type, object: u}
	if event.Type == watch.Added || event.Type == watch.Modified {
		// compactParentOf leaves u lean.
		e.decoded = u
	}
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
			return nil, err
		}
		p := out.(*compactParent)
		p.bookmarkAnnotations = annotations
		e.object = p
	}
	return e, nil
}
