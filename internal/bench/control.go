package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	rpprof "runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Stats is what a proxy process (a child of the harness) reports about
// itself on its control port.
type Stats struct {
	CPUUserNs  int64 `json:"cpu_user_ns"`
	CPUSysNs   int64 `json:"cpu_sys_ns"`
	RSS        int64 `json:"rss_bytes"`
	HeapInuse  uint64
	HeapAlloc  uint64
	StackInuse uint64
	Sys        uint64
	Goroutines int
	// TotalAlloc is every byte the heap ever allocated, NumGC the
	// collections so far: with the cost of one collection they give the
	// share of collecting garbage that the allocations of a window
	// amount to (gcShare).
	TotalAlloc uint64
	NumGC      uint32
	// GCPercent is the process's GOGC.
	GCPercent int
	// Forwarded counts requests the proxy forwarded upstream (the
	// ReverseProxy transport). Own counts requests its own clients
	// (informers, live GETs, side writes, reviews) sent, by "verb
	// resource"; both are counted at the transport, i.e. what reached the
	// wire towards kube-apiserver.
	Forwarded int64            `json:"forwarded"`
	Own       map[string]int64 `json:"own"`
	// Background counts the own requests no call causes, by "verb
	// resource": the probe of the proxy's namespace and the Lease of the
	// DriftReport sender, both periodic. They are not in Own.
	Background map[string]int64 `json:"background,omitempty"`
}

// CPU is user+system time.
func (s Stats) CPU() time.Duration { return time.Duration(s.CPUUserNs + s.CPUSysNs) }

// MemPeak is the result of a memory sampling window.
type MemPeak struct {
	BaseRSS, PeakRSS   int64
	BaseHeap, PeakHeap uint64
	Samples            int
}

// upstreamCounter counts requests on their way to kube-apiserver.
type upstreamCounter struct {
	forwarded atomic.Int64
	mu        sync.Mutex
	own       map[string]int64
	// background: see Stats.Background; proxyNamespace is the namespace
	// the proxy keeps its records and Lease in.
	background     map[string]int64
	proxyNamespace string
	info           *request.RequestInfoFactory
}

func newUpstreamCounter() *upstreamCounter {
	return &upstreamCounter{own: map[string]int64{}, background: map[string]int64{}, info: &request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}}
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrapForwarded is proxy.Options.WrapUpstreamTransport.
func (c *upstreamCounter) wrapForwarded(rt http.RoundTripper) http.RoundTripper {
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		c.forwarded.Add(1)
		return rt.RoundTrip(r)
	})
}

// wrapAll is rest.Config.WrapTransport of the proxy's upstream config: it
// sees forwarded requests and the proxy's own clients alike. The own
// clients identify themselves with the User-Agent "kausality-proxy"
// (proxy.Options.Config sets it); forwarded requests carry the caller's.
func (c *upstreamCounter) wrapAll(rt http.RoundTripper) http.RoundTripper {
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		if strings.HasPrefix(r.Header.Get("User-Agent"), "kausality-proxy") {
			c.countOwn(r)
		}
		return rt.RoundTrip(r)
	})
}

// countOwn counts one request of the proxy's own clients, by "verb
// resource", as background or not.
func (c *upstreamCounter) countOwn(r *http.Request) {
	key := r.Method + " " + r.URL.Path
	count := c.own
	if info, err := c.info.NewRequestInfo(r); err == nil && info.IsResourceRequest {
		key = info.Verb + " " + info.Resource
		if info.Subresource != "" {
			key += "/" + info.Subresource
		}
		if c.isBackground(info) {
			count = c.background
		}
	}
	c.mu.Lock()
	count[key]++
	c.mu.Unlock()
}

// isBackground reports whether info is one of the proxy's periodic
// requests, which no call causes: the readiness probe of its own namespace
// (a GET of that namespace) and the renewal of the DriftReport sender's
// Lease. Everything else the proxy's own clients send (live reads, dry
// runs, reviews, drift records, parent writes) is counted against the row
// it happens in.
func (c *upstreamCounter) isBackground(info *request.RequestInfo) bool {
	if c.proxyNamespace == "" {
		return false
	}
	switch {
	case info.Resource == "namespaces" && info.Name == c.proxyNamespace && info.Subresource == "":
		return info.Verb == "get"
	case info.Resource == "leases" && info.APIGroup == "coordination.k8s.io":
		return info.Namespace == c.proxyNamespace
	}
	return false
}

func (c *upstreamCounter) ownSnapshot() (own, background map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	own = make(map[string]int64, len(c.own))
	for k, v := range c.own {
		own[k] = v
	}
	background = make(map[string]int64, len(c.background))
	for k, v := range c.background {
		background[k] = v
	}
	return own, background
}

// controlServer exposes a child's stats, memory sampling, CPU profiling and
// net/http/pprof on a loopback port.
type controlServer struct {
	counter *upstreamCounter

	mu       sync.Mutex
	sampling *sampler
	cpuFile  *os.File
}

func (c *controlServer) serve(l net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, c.stats())
	})
	mux.HandleFunc("/gc", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		debug.FreeOSMemory()
		writeJSON(w, c.stats())
	})
	mux.HandleFunc("/sample/start", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.sampling != nil {
			c.sampling.stop()
		}
		c.sampling = startSampler(2 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/sample/stop", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.sampling == nil {
			http.Error(w, "not sampling", http.StatusConflict)
			return
		}
		p := c.sampling.stop()
		c.sampling = nil
		writeJSON(w, p)
	})
	mux.HandleFunc("/cpuprofile/start", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		f, err := os.Create(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := rpprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		c.cpuFile = f
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/cpuprofile/stop", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		rpprof.StopCPUProfile()
		if c.cpuFile != nil {
			_ = c.cpuFile.Close()
			c.cpuFile = nil
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
}

func (c *controlServer) stats() Stats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := Stats{
		CPUUserNs:  ru.Utime.Nano(),
		CPUSysNs:   ru.Stime.Nano(),
		RSS:        selfRSS(),
		HeapInuse:  ms.HeapInuse,
		HeapAlloc:  ms.HeapAlloc,
		StackInuse: ms.StackInuse,
		Sys:        ms.Sys,
		Goroutines: runtime.NumGoroutine(),
		TotalAlloc: ms.TotalAlloc,
		NumGC:      ms.NumGC,
		GCPercent:  gcPercent(),
	}
	if c.counter != nil {
		s.Forwarded = c.counter.forwarded.Load()
		s.Own, s.Background = c.counter.ownSnapshot()
	}
	return s
}

// gcPercent is GOGC as the runtime reads it: 100 unless set, "off" is -1.
func gcPercent() int {
	v := os.Getenv("GOGC")
	if v == "off" {
		return -1
	}
	if n, err := strconv.Atoi(v); err == nil {
		return n
	}
	return 100
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

var pageSize = int64(os.Getpagesize())

// selfRSS is the resident set size of this process (/proc/self/statm).
func selfRSS() int64 { return rssOf("self") }

// rssOf is the resident set size of process pid ("self" or a number), or 0
// when it cannot be read.
func rssOf(pid string) int64 {
	data, err := os.ReadFile("/proc/" + pid + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * pageSize
}

// sampler records the peak RSS and the peak heap (bytes in heap objects,
// live or not yet swept) at a fixed interval. It reads runtime/metrics,
// which does not stop the world.
type sampler struct {
	done chan struct{}
	out  chan MemPeak
}

func startSampler(interval time.Duration) *sampler {
	s := &sampler{done: make(chan struct{}), out: make(chan MemPeak, 1)}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() (int64, uint64) {
		metrics.Read(sample)
		return selfRSS(), sample[0].Value.Uint64()
	}
	var p MemPeak
	p.BaseRSS, p.BaseHeap = read()
	p.PeakRSS, p.PeakHeap = p.BaseRSS, p.BaseHeap
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			rss, heap := read()
			p.Samples++
			p.PeakRSS = max(p.PeakRSS, rss)
			p.PeakHeap = max(p.PeakHeap, heap)
			select {
			case <-s.done:
				s.out <- p
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() MemPeak {
	close(s.done)
	return <-s.out
}

// controlClient is the harness's side of a child's control port.
type controlClient struct {
	base string
	http *http.Client
}

func (c *controlClient) call(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	if out != nil {
		return json.Unmarshal(body, out)
	}
	return nil
}

func (c *controlClient) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.call(ctx, "/stats", &s)
	return s, err
}

func (c *controlClient) GC(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.call(ctx, "/gc", &s)
	return s, err
}
