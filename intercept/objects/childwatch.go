package objects

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"google.golang.org/protobuf/encoding/protowire"
)

// A watch of children decodes each event's object straight into a
// compactChild: the lean metadata's protobuf is the stored metadata's with
// some fields left out, so it is copied rather than decoded into an
// ObjectMeta (every managedFields entry a handful of allocations) and
// encoded again (the field numbers are in protobuffields.go).

// childWatchMediaType asks for the metadata of objects in protobuf, the
// only form childWatchSerializer reads.
const childWatchMediaType = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// protobufPrefix starts every object the protobuf serializer writes.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// compactChildFromMetadata is compactChildOf of the PartialObjectMetadata
// whose ObjectMeta is the protobuf meta, without decoding it: labels and
// managedFields left out, every other field copied as it is.
func compactChildFromMetadata(meta []byte) (*compactChild, error) {
	c := &compactChild{}
	kept := 0
	err := walkFields(meta, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
		switch num {
		case objectMetaLabels, objectMetaManagedFields:
			return nil
		case objectMetaName, objectMetaNamespace, objectMetaUID:
			s, err := metadataString(num, typ, value)
			if err != nil {
				return err
			}
			switch num {
			case objectMetaName:
				c.name = s
			case objectMetaNamespace:
				c.namespace = s
			default:
				c.uid = types.UID(s)
			}
		}
		kept += len(field)
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.protobuf = make([]byte, 0, kept)
	_ = walkFields(meta, func(num protowire.Number, _ protowire.Type, field, _ []byte) error {
		if num != objectMetaLabels && num != objectMetaManagedFields {
			c.protobuf = append(c.protobuf, field...)
		}
		return nil
	})
	return c, nil
}

// metadataString is the string field num of the metadata, of type typ,
// whose value is value.
func metadataString(num protowire.Number, typ protowire.Type, value []byte) (string, error) {
	if typ != protowire.BytesType {
		return "", fmt.Errorf("field %d of the metadata is not a string", num)
	}
	s, _ := protowire.ConsumeBytes(value)
	return string(s), nil
}

// walkFields calls each with every field of the protobuf message b: the
// field whole (tag included) and its value.
func walkFields(b []byte, each func(num protowire.Number, typ protowire.Type, field, value []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		if err := each(num, typ, b[:n+m], b[n:n+m]); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}

// bytesField is the last value of field num of b, a string or message.
func bytesField(b []byte, num protowire.Number) ([]byte, error) {
	var found []byte
	err := walkFields(b, func(n protowire.Number, typ protowire.Type, _, value []byte) error {
		if n != num {
			return nil
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("field %d is not a string or message", num)
		}
		found, _ = protowire.ConsumeBytes(value)
		return nil
	})
	return found, err
}

// childWatchSerializer decodes the objects of a watch of children: a child
// into a compactChild, a Status (an error event, an error response) into
// a Status. It encodes nothing: the watch sends no body.
type childWatchSerializer struct{}

var _ runtime.Serializer = childWatchSerializer{}

func (childWatchSerializer) Decode(data []byte, _ *schema.GroupVersionKind, _ runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return nil, nil, errors.New("a watch of children sent an object that is not protobuf")
	}
	envelope := data[len(protobufPrefix):]
	encoding, err := bytesField(envelope, unknownContentEncoding)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a child: %w", err)
	}
	if len(encoding) > 0 {
		return nil, nil, fmt.Errorf("a watch of children sent an object with content encoding %q", encoding)
	}
	typeMeta, err := bytesField(envelope, unknownTypeMeta)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a child: %w", err)
	}
	kind, err := bytesField(typeMeta, typeMetaKind)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a child: %w", err)
	}
	raw, err := bytesField(envelope, unknownRaw)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a child: %w", err)
	}
	if string(kind) == "Status" {
		status := &metav1.Status{}
		if err := status.Unmarshal(raw); err != nil {
			return nil, nil, fmt.Errorf("decoding a Status from a watch of children: %w", err)
		}
		gvk := metav1.SchemeGroupVersion.WithKind("Status")
		status.SetGroupVersionKind(gvk)
		return status, &gvk, nil
	}
	meta, err := bytesField(raw, objectMetadata)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a child: %w", err)
	}
	c, err := compactChildFromMetadata(meta)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding the metadata of a child: %w", err)
	}
	gvk := metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata")
	return c, &gvk, nil
}

func (childWatchSerializer) Encode(runtime.Object, io.Writer) error {
	return errors.New("a watch of children encodes nothing")
}

func (childWatchSerializer) Identifier() runtime.Identifier { return "kausality-compact-child" }

// watchEventSerializer decodes the frames of a watch of children into
// WatchEvents whose object's bytes are those of the frame, not a copy: the
// watch decodes the object from them before it reads the next frame into
// the same buffer, and childWatchSerializer copies what it keeps.
type watchEventSerializer struct{}

var _ runtime.Serializer = watchEventSerializer{}

func (watchEventSerializer) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	event, ok := into.(*metav1.WatchEvent)
	if !ok {
		return nil, nil, fmt.Errorf("a watch of children decodes watch events, not %T", into)
	}
	typ, err := bytesField(data, watchEventType)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a child: %w", err)
	}
	object, err := bytesField(data, watchEventObject)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a child: %w", err)
	}
	raw, err := bytesField(object, rawExtensionRaw)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event of a child: %w", err)
	}
	event.Type = eventType(typ)
	event.Object = runtime.RawExtension{Raw: raw}
	gvk := metav1.SchemeGroupVersion.WithKind("WatchEvent")
	return event, &gvk, nil
}

// eventType is typ without allocating for the types a watch sends.
func eventType(typ []byte) string {
	for _, t := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if string(typ) == string(t) {
			return string(t)
		}
	}
	return string(typ)
}

func (watchEventSerializer) Encode(runtime.Object, io.Writer) error {
	return errors.New("a watch of children encodes nothing")
}

func (watchEventSerializer) Identifier() runtime.Identifier { return "kausality-child-watch-event" }

// childWatchCodecs is the negotiated serializer of the watches of
// children: protobuf only, framed as any protobuf watch is, the events
// decoded by watchEventSerializer and their objects by
// childWatchSerializer.
type childWatchCodecs struct{}

func (childWatchCodecs) SupportedMediaTypes() []runtime.SerializerInfo {
	for _, info := range metainternalversionscheme.Codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf && info.StreamSerializer != nil {
			info.Serializer = childWatchSerializer{}
			info.PrettySerializer, info.StrictSerializer = nil, nil
			stream := *info.StreamSerializer
			stream.Serializer = watchEventSerializer{}
			info.StreamSerializer = &stream
			return []runtime.SerializerInfo{info}
		}
	}
	return nil
}

func (childWatchCodecs) EncoderForVersion(e runtime.Encoder, _ runtime.GroupVersioner) runtime.Encoder {
	return e
}

func (childWatchCodecs) DecoderToVersion(d runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return d
}

// childWatchClient is the REST client of the watches of children, on the
// HTTP client of the caches' metadata client.
func childWatchClient(cfg *rest.Config, client *http.Client) (rest.Interface, error) {
	c := metadata.ConfigFor(cfg)
	c.AcceptContentTypes = childWatchMediaType
	c.ContentType = runtime.ContentTypeProtobuf
	c.NegotiatedSerializer = childWatchCodecs{}
	// Options are sent as query parameters, versioned as meta/v1's.
	c.GroupVersion = &metav1.SchemeGroupVersion
	c.APIPath = "/never-sent"
	return rest.RESTClientForConfigAndClient(c, client)
}

// resourcePath is the path of every object of gvr, in any namespace.
func resourcePath(gvr schema.GroupVersionResource) []string {
	if gvr.Group == "" {
		return []string{"api", gvr.Version, gvr.Resource}
	}
	return []string{"apis", gvr.Group, gvr.Version, gvr.Resource}
}
