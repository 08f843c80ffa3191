package objects

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

func protobufSerializer(t testing.TB) runtime.SerializerInfo {
	t.Helper()
	for _, info := range metainternalversionscheme.Codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf {
			return info
		}
	}
	t.Fatal("no protobuf serializer for meta/v1")
	return runtime.SerializerInfo{}
}

// asWatched is obj as kube-apiserver writes it into a watch event of a
// metadata watch.
func asWatched(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobufSerializer(t).Serializer.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func partialMetadata(m metav1.ObjectMeta) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{ObjectMeta: m}
	p.APIVersion, p.Kind = "meta.k8s.io/v1", "PartialObjectMetadata"
	return p
}

// assertSameCompactChild fails unless got is what the transform of the
// caches of children makes of the decoded metadata want.
func assertSameCompactChild(t *testing.T, got runtime.Object, want *metav1.PartialObjectMetadata) {
	t.Helper()
	wantRV, wantAnnotations := want.ResourceVersion, want.Annotations
	transformed, err := compactChildOf(want.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	w := transformed.(*compactChild)
	g, ok := got.(*compactChild)
	if !ok {
		t.Fatalf("decoded %T, want *compactChild", got)
	}
	if g.namespace != w.namespace || g.name != w.name || g.uid != w.uid {
		t.Errorf("identity %q/%q %q, want %q/%q %q", g.namespace, g.name, g.uid, w.namespace, w.name, w.uid)
	}
	if !bytes.Equal(g.protobuf, w.protobuf) {
		t.Errorf("protobuf differs from the transform's:\n got %x\nwant %x", g.protobuf, w.protobuf)
	}
	if rv := g.GetResourceVersion(); rv != wantRV {
		t.Errorf("resourceVersion %q, want %q", rv, wantRV)
	}
	if a := g.GetAnnotations(); !equality.Semantic.DeepEqual(a, wantAnnotations) {
		t.Errorf("annotations %v, want %v", a, wantAnnotations)
	}
}

// A watched child decodes into the compact child the transform makes of
// it decoded: the same bytes, without ever holding its labels or
// managedFields.
func TestChildWatchDecodesTheCompactChild(t *testing.T) {
	deleted := metav1.Unix(1790000100, 0)
	grace := int64(30)
	for name, m := range map[string]metav1.ObjectMeta{
		"a ReplicaSet with labels and managedFields": storedReplicaSetMetadata(3).ObjectMeta,
		"only a name":    {Name: "n"},
		"cluster-scoped": {Name: "node-1", UID: "u-1", ResourceVersion: "9", Labels: map[string]string{"zone": "a"}},
		"being deleted, with finalizers": {Name: "d", Namespace: "ns", UID: "u-2", ResourceVersion: "10", Generation: 4,
			DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: &grace, Finalizers: []string{"example.com/hold", "b"},
			GenerateName: "d-", Annotations: map[string]string{"a": "", "b": "c"}},
		"a bookmark ending the initial events": {ResourceVersion: "12345",
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
	} {
		t.Run(name, func(t *testing.T) {
			want := partialMetadata(m)
			got, gvk, err := childWatchSerializer{}.Decode(asWatched(t, want), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if gvk.Kind != "PartialObjectMetadata" {
				t.Errorf("kind %q", gvk.Kind)
			}
			assertSameCompactChild(t, got, want)
		})
	}
}

// An error event of a watch of children decodes into its Status, which the
// reflector turns into the error it backs off on.
func TestChildWatchDecodesAStatus(t *testing.T) {
	want := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
		Message: "too old resource version: 1 (200)"}
	want.APIVersion, want.Kind = "v1", "Status"
	got, _, err := childWatchSerializer{}.Decode(asWatched(t, want), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, ok := got.(*metav1.Status)
	if !ok {
		t.Fatalf("decoded %T, want *metav1.Status", got)
	}
	if status.Code != want.Code || status.Reason != want.Reason || status.Message != want.Message {
		t.Errorf("decoded %+v, want %+v", status, want)
	}
}

// What is not a child in protobuf is an error, never a child.
func TestChildWatchRejectsWhatIsNotAChild(t *testing.T) {
	valid := asWatched(t, partialMetadata(metav1.ObjectMeta{Name: "n"}))
	for name, data := range map[string][]byte{
		"JSON":      []byte(`{"kind":"PartialObjectMetadata","metadata":{"name":"n"}}`),
		"truncated": valid[:len(valid)/2],
		"name not a string": append(append([]byte{}, protobufPrefix...),
			// Unknown{raw: PartialObjectMetadata{metadata: ObjectMeta{name: varint 1}}}
			0x12, 0x04, 0x0a, 0x02, 0x08, 0x01),
	} {
		t.Run(name, func(t *testing.T) {
			if obj, _, err := (childWatchSerializer{}).Decode(data, nil, nil); err == nil {
				t.Errorf("decoded %#v, want an error", obj)
			}
		})
	}
}

// The client of the watches of children reads a watch stream as
// kube-apiserver writes it: children compact, written into the cache's
// store; bookmarks with what the reflector reads of them, and errors as
// their Status, handed to the reflector, after the last child written
// into the store, so that the reflector resumes the watch from there.
func TestChildWatchClientReadsAWatchStream(t *testing.T) {
	child := storedReplicaSetMetadata(1)
	bookmark := partialMetadata(metav1.ObjectMeta{ResourceVersion: "200",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}})
	gone := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired}
	gone.APIVersion, gone.Kind = "v1", "Status"
	events := []struct {
		typ watch.EventType
		obj runtime.Object
	}{{watch.Added, child}, {watch.Bookmark, bookmark}, {watch.Added, storedReplicaSetMetadata(2)}, {watch.Error, gone}}

	var query, accept, proto, otherProto string
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			otherProto = r.Proto
			return
		}
		query, accept, proto = r.URL.RawQuery, r.Header.Get("Accept"), r.Proto
		info := protobufSerializer(t)
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
		enc := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(w), info.StreamSerializer.Serializer)
		for _, e := range events {
			if err := enc.Encode(&metav1.WatchEvent{Type: string(e.typ), Object: runtime.RawExtension{Raw: asWatched(t, e.obj)}}); err != nil {
				t.Error(err)
			}
		}
	}))
	server.EnableHTTP2 = true
	server.StartTLS()
	defer server.Close()
	cfg := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	cachesOver, err := CachesOver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := New(context.Background(), nil, nil, nil, cachesOver)
	store := newObjectStore(childKind, s.observersNow)
	timeout := int64(60)
	w, err := watchIntoStore(store.current(), s.openChildWatch(deployments, &exclusionSelector{gvr: deployments}))(context.Background(), metav1.ListOptions{ResourceVersion: "100", TimeoutSeconds: &timeout, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []watch.Event
	for e := range w.ResultChan() {
		got = append(got, e)
	}
	want := []watch.EventType{watch.Bookmark, watch.Added, watch.Error}
	if len(got) != len(want) {
		t.Fatalf("handed on %d events, want %d: %v", len(got), len(want), got)
	}
	for i, typ := range want {
		if got[i].Type != typ {
			t.Errorf("event %d is %s, want %s", i, got[i].Type, typ)
		}
	}
	assertSameCompactChild(t, got[0].Object, bookmark)
	assertSameCompactChild(t, got[1].Object, storedReplicaSetMetadata(2))
	if s, ok := got[2].Object.(*metav1.Status); !ok || s.Code != http.StatusGone {
		t.Errorf("error event holds %#v, want the Status", got[2].Object)
	}
	for i, name := range []string{child.Name, "c-000002"} {
		obj, exists, err := store.indexer.GetByKey(child.Namespace + "/" + name)
		if err != nil || !exists {
			t.Fatalf("the store lacks child %d: %v", i+1, err)
		}
		assertSameCompactChild(t, obj.(*compactChild), storedReplicaSetMetadata(i+1))
	}
	if proto != "HTTP/1.1" {
		t.Errorf("the watch went over %s, want HTTP/1.1", proto)
	}
	// The server speaks HTTP/2 to a client that lets it.
	direct, err := rest.RESTClientFor(&rest.Config{Host: server.URL, TLSClientConfig: cfg.TLSClientConfig,
		APIPath: "/api", ContentConfig: rest.ContentConfig{GroupVersion: &metav1.SchemeGroupVersion, NegotiatedSerializer: childWatchCodecs{}}})
	if err != nil {
		t.Fatal(err)
	}
	_ = direct.Get().AbsPath("/healthz").Do(context.Background())
	if otherProto != "HTTP/2.0" {
		t.Errorf("a default client spoke %s to the server, want HTTP/2.0", otherProto)
	}
	if accept != childWatchMediaType {
		t.Errorf("Accept %q, want %q", accept, childWatchMediaType)
	}
	for _, param := range []string{"watch=true", "resourceVersion=100", "timeoutSeconds=60", "allowWatchBookmarks=true"} {
		if !bytes.Contains([]byte(query), []byte(param)) {
			t.Errorf("query %q lacks %s", query, param)
		}
	}
}

// For any ObjectMeta, the compact child copied from its protobuf is the
// one the transform makes of it decoded.
func FuzzCompactChildFromMetadata(f *testing.F) {
	for _, m := range []metav1.ObjectMeta{storedReplicaSetMetadata(1).ObjectMeta, {Name: "n"}, {}} {
		data, err := m.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m metav1.ObjectMeta
		if err := m.Unmarshal(data); err != nil {
			// Not an ObjectMeta: an error or a child, never a panic.
			_, _ = compactChildFromMetadata(data)
			return
		}
		canonical, err := m.Marshal()
		if err != nil {
			// An ObjectMeta the generated code does not encode has no
			// canonical bytes to compare.
			return
		}
		var decoded metav1.ObjectMeta
		if err := decoded.Unmarshal(canonical); err != nil {
			t.Fatal(err)
		}
		got, err := compactChildFromMetadata(canonical)
		if err != nil {
			t.Fatal(err)
		}
		assertSameCompactChild(t, got, partialMetadata(decoded))
	})
}

// BenchmarkChildWatchDecode is the decoding of one frame of a watch of
// children into what the cache of children holds: the event and its
// object decoded as the metadata client decodes them, then the transform;
// or the event read in place and the object copied into the compact child.
func BenchmarkChildWatchDecode(b *testing.B) {
	info := protobufSerializer(b)
	var frame bytes.Buffer
	if err := info.StreamSerializer.Serializer.Encode(&metav1.WatchEvent{Type: string(watch.Modified),
		Object: runtime.RawExtension{Raw: asWatched(b, storedReplicaSetMetadata(1))}}, &frame); err != nil {
		b.Fatal(err)
	}
	data := frame.Bytes()
	for _, c := range []struct {
		name            string
		events, objects runtime.Decoder
		transformed     bool
	}{
		{"decoded", info.StreamSerializer.Serializer, info.Serializer, true},
		{"copied", watchEventSerializer{}, childWatchSerializer{}, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var event metav1.WatchEvent
				if _, _, err := c.events.Decode(data, nil, &event); err != nil {
					b.Fatal(err)
				}
				obj, err := runtime.Decode(c.objects, event.Object.Raw)
				if err != nil {
					b.Fatal(err)
				}
				if c.transformed {
					if _, err := compactChildOf(obj); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// A watch event's object is read where the frame holds it, not copied; a
// frame that is not a watch event is an error.
func TestWatchEventDecodesWithoutCopying(t *testing.T) {
	object := asWatched(t, storedReplicaSetMetadata(2))
	var frame bytes.Buffer
	if err := protobufSerializer(t).StreamSerializer.Serializer.Encode(&metav1.WatchEvent{Type: string(watch.Modified),
		Object: runtime.RawExtension{Raw: object}}, &frame); err != nil {
		t.Fatal(err)
	}
	data := frame.Bytes()
	got, _, err := watchEventSerializer{}.Decode(data, nil, &metav1.WatchEvent{})
	if err != nil {
		t.Fatal(err)
	}
	event := got.(*metav1.WatchEvent)
	if event.Type != string(watch.Modified) || !bytes.Equal(event.Object.Raw, object) {
		t.Fatalf("decoded %s with %d bytes, want MODIFIED with the object's %d", event.Type, len(event.Object.Raw), len(object))
	}
	if end := &data[len(data)-1]; &event.Object.Raw[len(event.Object.Raw)-1] != end {
		t.Error("the object's bytes were copied out of the frame")
	}
	if _, _, err := (watchEventSerializer{}).Decode(data[:len(data)/2], nil, &metav1.WatchEvent{}); err == nil {
		t.Error("a truncated frame decoded")
	}
}
