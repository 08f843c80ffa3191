package objects

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// parentServer is kube-apiserver as a store's caches of parents read it,
// over TLS and HTTP/1.1, in JSON: a list or a watch list of the parents it
// holds, then a watch that sends the events the test sends, one at a time,
// each flushed as kube-apiserver flushes every event.
type parentServer struct {
	t      testing.TB
	server *httptest.Server

	mu sync.Mutex
	// noWatchList refuses a watch list, as a kube-apiserver without it
	// does: the reflector lists instead.
	noWatchList bool
	// parents by namespace/name.
	parents map[string][]byte
	version int
	opened  int
	// selectors are the field selectors of the lists and watches asked,
	// watchAccepts the media types the watches asked for.
	selectors, watchAccepts []string

	frames chan sentFrame
}

func newParentServer(t testing.TB, parents ...[]byte) *parentServer {
	s := &parentServer{t: t, parents: map[string][]byte{}, version: 1000, frames: make(chan sentFrame)}
	for _, p := range parents {
		s.put(p)
	}
	s.server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.server.StartTLS()
	t.Cleanup(s.server.Close)
	return s
}

// put stores a parent without an event.
func (s *parentServer) put(parent []byte) {
	var m struct {
		Metadata struct{ Namespace, Name string } `json:"metadata"`
	}
	if err := json.Unmarshal(parent, &m); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parents[cacheKey(m.Metadata.Namespace, m.Metadata.Name)] = parent
	s.version++
}

// fieldSelectors are the field selectors of the lists and watches asked
// so far.
func (s *parentServer) fieldSelectors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.selectors)
}

// acceptedByWatches are the media types the watches asked for so far.
func (s *parentServer) acceptedByWatches() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.watchAccepts)
}

func (s *parentServer) watchesOpened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// storeExcluding is a Store whose caches list and watch s, leaving out
// the namespaces excluded says.
func (s *parentServer) storeExcluding(ctx context.Context, excluded *excludedNamespaces) *Store {
	s.t.Helper()
	return storeExcluding(ctx, s.t, s.server.URL, excluded)
}

// store is a Store whose caches list and watch s.
func (s *parentServer) store(ctx context.Context) *Store {
	s.t.Helper()
	cachesOver, err := CachesOver(&rest.Config{Host: s.server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		s.t.Fatal(err)
	}
	return New(ctx, nil, nil, nil, cachesOver)
}

// send sends an event to the open watch, waiting for one to be open; a
// nil frame ends the watch without an event.
func (s *parentServer) send(frame []byte, last bool) {
	select {
	case s.frames <- sentFrame{frame: frame, last: last}:
	case <-time.After(time.Minute):
		s.t.Fatal("no watch took an event for a minute")
	}
}

// parentEventFrame is a JSON watch event of the parent whose JSON is object,
// as kube-apiserver writes it.
func parentEventFrame(typ watch.EventType, object []byte) []byte {
	return []byte(`{"type":"` + string(typ) + `","object":` + string(object) + "}\n")
}

func (s *parentServer) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	selector, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.selectors = append(s.selectors, q.Get("fieldSelector"))
	version := strconv.Itoa(s.version)
	var parents []string
	for key, p := range s.parents {
		namespace, _, _ := strings.Cut(key, "/")
		if selector.Matches(fields.Set{"metadata.namespace": namespace}) {
			parents = append(parents, string(p))
		}
	}
	if q.Get("watch") == "true" {
		s.opened++
		s.watchAccepts = append(s.watchAccepts, r.Header.Get("Accept"))
	}
	noWatchList := s.noWatchList
	s.mu.Unlock()
	inProtobuf := strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf)
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") != "true" {
		fmt.Fprintf(w, `{"apiVersion":"apps/v1","kind":"DeploymentList","metadata":{"resourceVersion":%q},"items":[%s]}`,
			version, strings.Join(parents, ","))
		return
	}
	if q.Get("sendInitialEvents") == "true" && noWatchList {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"BadRequest","code":400,"message":"no watch list"}`))
		return
	}
	flusher := w.(http.Flusher)
	frameOf := parentEventFrame
	if inProtobuf {
		// As kube-apiserver answers a watch asked for in protobuf: each
		// event a WatchEvent, framed by its length.
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf+";stream=watch")
		frameOf = func(typ watch.EventType, object []byte) []byte {
			return typedEventFrame(s.t, typ, typedDeployment(s.t, object))
		}
	}
	if q.Get("sendInitialEvents") == "true" {
		for _, p := range parents {
			_, _ = w.Write(frameOf(watch.Added, []byte(p)))
		}
		_, _ = w.Write(frameOf(watch.Bookmark, fmt.Appendf(nil,
			`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"resourceVersion":%q,"annotations":{%q:"true"}}}`,
			version, metav1.InitialEventsAnnotationKey)))
	}
	flusher.Flush()
	sendFrames(r, w, flusher, s.frames)
}

// storedDeploymentJSON is storedDeployment number i at resourceVersion rv.
func storedDeploymentJSON(i, rv int) []byte {
	return []byte(strings.NewReplacer("NAME", fmt.Sprintf("p-%05d", i), "UID", fmt.Sprintf("0f6d1c3e-8a52-4c1e-9b3a-%012d", i),
		`"resourceVersion":"123456"`, fmt.Sprintf(`"resourceVersion":"%d"`, rv)).Replace(storedDeployment))
}

// parentObserver records what it hears of parents, and says when it has
// heard of one.
type parentObserver struct {
	mu       sync.Mutex
	observed map[string]*unstructured.Unstructured
	forgot   map[types.UID]bool
	changes  int
	heard    chan struct{}
}

func newParentObserver() *parentObserver {
	return &parentObserver{observed: map[string]*unstructured.Unstructured{}, forgot: map[types.UID]bool{}, heard: make(chan struct{}, 1)}
}

func (o *parentObserver) Observe(u *unstructured.Unstructured) {
	o.mu.Lock()
	o.observed[u.GetName()] = u
	o.changes++
	o.mu.Unlock()
	o.tell()
}

func (o *parentObserver) Forget(uid types.UID) {
	o.mu.Lock()
	o.forgot[uid] = true
	o.mu.Unlock()
	o.tell()
}

func (o *parentObserver) tell() {
	select {
	case o.heard <- struct{}{}:
	default:
	}
}

func (o *parentObserver) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changes
}
