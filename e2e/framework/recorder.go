package framework

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Recorded is one request as it left the proxy for kube-apiserver.
type Recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// Recorder wraps the proxy's upstream transport and keeps the requests
// whose path contains one of the watched markers, bytes and all.
type Recorder struct {
	mu      sync.Mutex
	markers []string
	seen    []Recorded
}

// Watch starts recording requests whose path contains marker.
func (r *Recorder) Watch(marker string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markers = append(r.markers, marker)
}

// Requests returns the recorded requests whose path contains marker.
func (r *Recorder) Requests(marker string) []Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Recorded
	for _, s := range r.seen {
		if strings.Contains(s.Path, marker) {
			out = append(out, s)
		}
	}
	return out
}

// Wrap is the transport wrapper to give the proxy.
func (r *Recorder) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		r.mu.Lock()
		watched := false
		for _, m := range r.markers {
			if strings.Contains(req.URL.Path, m) {
				watched = true
			}
		}
		r.mu.Unlock()
		if watched {
			var body []byte
			if req.Body != nil {
				body, _ = io.ReadAll(req.Body)
				_ = req.Body.Close()
				req.Body = io.NopCloser(bytes.NewReader(body))
			}
			r.mu.Lock()
			r.seen = append(r.seen, Recorded{Method: req.Method, Path: req.URL.Path, RawQuery: req.URL.RawQuery, Header: req.Header.Clone(), Body: body})
			r.mu.Unlock()
		}
		return next.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
