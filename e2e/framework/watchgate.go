package framework

import (
	"io"
	"net/http"
	"strings"
	"sync"
)

// WatchGate holds back the watch streams of the proxy's own caches for one
// resource at a time, so that a test can make the proxy's cache
// deterministically stale: events that arrive while the gate is held are
// delivered when it is released.
type WatchGate struct {
	mu       sync.Mutex
	held     string // resource (plural) whose watches are held; "" none
	released *sync.Cond
}

// NewWatchGate returns an open gate.
func NewWatchGate() *WatchGate {
	g := &WatchGate{}
	g.released = sync.NewCond(&g.mu)
	return g
}

// Wrap is proxy.Options.WrapOwnTransport.
func (g *WatchGate) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.URL.Query().Get("watch") != "true" {
			return resp, err
		}
		resp.Body = &gatedBody{ReadCloser: resp.Body, gate: g, path: req.URL.Path}
		return resp, nil
	})
}

// Hold holds the watches of resource until the returned release is called.
func (g *WatchGate) Hold(resource string) (release func()) {
	g.mu.Lock()
	g.held = resource
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.held = ""
		g.mu.Unlock()
		g.released.Broadcast()
	}
}

func (g *WatchGate) wait(path string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.held != "" && strings.HasSuffix(path, "/"+g.held) {
		g.released.Wait()
	}
}

type gatedBody struct {
	io.ReadCloser
	gate *WatchGate
	path string
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// What was read is handed over only when the gate is open: the
	// informer sees the event after the release.
	b.gate.wait(b.path)
	return n, err
}
