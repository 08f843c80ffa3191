package objects

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// childServer is kube-apiserver as a store's caches of children read it,
// over TLS and HTTP/1.1: a watch list (the children it holds as initial
// events, then the bookmark that ends them) or a list, then a protobuf
// watch that sends the frames the test sends, one at a time, each
// flushed as kube-apiserver flushes every event.
type childServer struct {
	t      testing.TB
	server *httptest.Server

	mu       sync.Mutex
	children map[string]*metav1.PartialObjectMetadata
	version  int
	// opened counts the watches opened; versions are the resourceVersions
	// they asked to start from.
	opened   int
	versions []string
	// afterInitialEvents is sent right after the initial events of the
	// next watch list, in the same write.
	afterInitialEvents []byte
	// selectors are the field selectors of the lists and watches, in the
	// order asked; open counts the watches not ended yet.
	selectors []string
	open      int
	// listsHeld, while set, holds every list and watch list until it is
	// closed.
	listsHeld chan struct{}
	// refusesSelectors answers a request with a field selector 400 Bad
	// Request, as a server that does not take it.
	refusesSelectors bool

	frames chan sentFrame
}

type sentFrame struct {
	frame []byte
	// last ends the watch once the frame is sent, as an error event does.
	last bool
}

func newChildServer(t testing.TB, children ...*metav1.PartialObjectMetadata) *childServer {
	s := &childServer{t: t, children: map[string]*metav1.PartialObjectMetadata{}, version: 1000, frames: make(chan sentFrame)}
	for _, c := range children {
		s.children[c.Name] = c
	}
	s.server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.server.StartTLS()
	t.Cleanup(s.server.Close)
	return s
}

// store is a Store whose caches list and watch s.
func (s *childServer) store(ctx context.Context) *Store {
	s.t.Helper()
	cachesOver, err := CachesOver(&rest.Config{Host: s.server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		s.t.Fatal(err)
	}
	return New(ctx, nil, nil, nil, cachesOver)
}

// holdLists holds every list and watch list from now until the returned
// func is called.
func (s *childServer) holdLists() (release func()) {
	held := make(chan struct{})
	s.mu.Lock()
	s.listsHeld = held
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.listsHeld = nil
		s.mu.Unlock()
		close(held)
	}
}

// fieldSelectors are the field selectors of the lists and watches asked
// so far, and how many watches are open.
func (s *childServer) fieldSelectors() (selectors []string, openWatches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.selectors), s.open
}

// remove deletes a child without an event: as a deletion while the
// cache's watch was broken off.
func (s *childServer) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.children, name)
	s.version++
}

// send sends an event to the open watch, waiting for one to be open; a
// nil frame ends the watch without an event, as a watch's timeout does.
func (s *childServer) send(frame []byte, last bool) {
	select {
	case s.frames <- sentFrame{frame: frame, last: last}:
	case <-time.After(time.Minute):
		s.t.Fatal("no watch took an event for a minute")
	}
}

func (s *childServer) watchesOpened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// watchedFrom is the resourceVersion each watch asked to start from.
func (s *childServer) watchedFrom() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.versions)
}

// watchFrame is the frame of a watch event of obj, as kube-apiserver
// writes it to a protobuf watch of metadata (without the length before it).
func watchFrame(t testing.TB, typ watch.EventType, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	event := &metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: asWatched(t, obj)}}
	if err := protobufSerializer(t).StreamSerializer.Serializer.Encode(event, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func (s *childServer) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	selector, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	listing := q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true"
	s.mu.Lock()
	held := s.listsHeld
	s.mu.Unlock()
	if held != nil && listing {
		select {
		case <-held:
		case <-r.Context().Done():
			return
		}
	}
	s.mu.Lock()
	s.selectors = append(s.selectors, q.Get("fieldSelector"))
	if s.refusesSelectors && q.Get("fieldSelector") != "" {
		s.mu.Unlock()
		status := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
			Message: "field label not supported: metadata.namespace"}
		status.APIVersion, status.Kind = "v1", "Status"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(status)
		return
	}
	version := strconv.Itoa(s.version)
	var children []metav1.PartialObjectMetadata
	for _, c := range s.children {
		if selector.Matches(fields.Set{"metadata.name": c.Name, "metadata.namespace": c.Namespace}) {
			children = append(children, *c)
		}
	}
	var afterInitialEvents []byte
	if q.Get("watch") == "true" {
		s.open++
		defer func() { s.mu.Lock(); s.open--; s.mu.Unlock() }()
		s.opened++
		s.versions = append(s.versions, q.Get("resourceVersion"))
		if q.Get("sendInitialEvents") == "true" {
			afterInitialEvents, s.afterInitialEvents = s.afterInitialEvents, nil
		}
	}
	s.mu.Unlock()
	if q.Get("watch") != "true" {
		list := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: version}, Items: children}
		list.APIVersion, list.Kind = "meta.k8s.io/v1", "PartialObjectMetadataList"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(list)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
	frames := protobufSerializer(s.t).StreamSerializer.Framer.NewFrameWriter(w)
	flusher := w.(http.Flusher)
	if q.Get("sendInitialEvents") == "true" {
		for i := range children {
			_, _ = frames.Write(watchFrame(s.t, watch.Added, &children[i]))
		}
		end := partialMetadata(metav1.ObjectMeta{ResourceVersion: version,
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}})
		_, _ = frames.Write(watchFrame(s.t, watch.Bookmark, end))
		if afterInitialEvents != nil {
			_, _ = frames.Write(afterInitialEvents)
		}
	}
	flusher.Flush()
	sendFrames(r, frames, flusher, s.frames)
}

// sendFrames writes each frame the test sends to w, flushed as
// kube-apiserver flushes every event, until the request ends, the test
// ends the watch (a nil frame), or a frame is the last.
func sendFrames(r *http.Request, w io.Writer, flusher http.Flusher, sent <-chan sentFrame) {
	for {
		select {
		case <-r.Context().Done():
			return
		case f := <-sent:
			if f.frame == nil {
				return
			}
			if _, err := w.Write(f.frame); err != nil {
				return
			}
			flusher.Flush()
			if f.last {
				return
			}
		}
	}
}
