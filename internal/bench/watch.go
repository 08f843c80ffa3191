package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// watcher is one open watch of the watch-target ConfigMap.
type watcher struct {
	target   int
	body     io.ReadCloser
	arrivals []arrival
}

type arrival struct {
	rv string
	at time.Time
}

var rvKey = []byte(`"resourceVersion":"`)

// openWatch starts a watch and returns once the response headers arrived.
func openWatch(ctx context.Context, t *target, rv string) (io.ReadCloser, error) {
	path := "/api/v1/namespaces/" + nsWatch + "/configmaps?watch=true&fieldSelector=metadata.name%3Dwatch-target&timeoutSeconds=1800&resourceVersion=" + rv
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("User-Agent", userAgent)
	resp, err := t.client.Do(hr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("watch via %s: HTTP %d: %s", t.name, resp.StatusCode, b)
	}
	return resp.Body, nil
}

// read records the arrival of every event (by its resourceVersion) and
// counts it in seen.
func (w *watcher) read(seen *atomic.Int64) {
	br := bufio.NewReaderSize(w.body, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			now := time.Now()
			if i := bytes.Index(line, rvKey); i >= 0 {
				rest := line[i+len(rvKey):]
				if j := bytes.IndexByte(rest, '"'); j >= 0 {
					w.arrivals = append(w.arrivals, arrival{string(rest[:j]), now})
					seen.Add(1)
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return
		}
	}
}

// bump changes the watched ConfigMap directly and returns the send time
// and the new resourceVersion.
func (h *Harness) bump(ctx context.Context) (time.Time, string, error) {
	patch := fmt.Sprintf(`{"data":{"seq":"%d"}}`, writeSeq.Add(1))
	start := time.Now()
	cm, err := h.admin.CoreV1().ConfigMaps(nsWatch).Patch(ctx, "watch-target", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return start, "", err
	}
	return start, cm.ResourceVersion, nil
}

// watchLatency opens `watchers` watches per target (all at once), then
// changes the object `events` times, one at a time, and measures for every
// watcher the time from sending the change (directly to kube-apiserver) to
// the event arriving.
func (h *Harness) watchLatency(ctx context.Context) (Row, error) {
	n := h.cfg.Watchers
	cm, err := h.admin.CoreV1().ConfigMaps(nsWatch).Get(ctx, "watch-target", metav1.GetOptions{})
	if err != nil {
		return Row{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		seen     atomic.Int64
		wg       sync.WaitGroup
		watchers []*watcher
	)
	for i := 0; i < n; i++ {
		for _, idx := range orders[i%len(orders)] {
			body, err := openWatch(wctx, h.targets[idx], cm.ResourceVersion)
			if err != nil {
				return Row{}, err
			}
			w := &watcher{target: idx, body: body}
			watchers = append(watchers, w)
			wg.Add(1)
			go func() { defer wg.Done(); w.read(&seen) }()
		}
	}
	total := int64(len(watchers))
	sent := map[string]time.Time{}
	for e := -2; e < h.cfg.WatchEvents; e++ { // two unmeasured events to prime every stream
		want := seen.Load() + total
		t0, rv, err := h.bump(ctx)
		if err != nil {
			return Row{}, err
		}
		if e >= 0 {
			sent[rv] = t0
		}
		deadline := time.Now().Add(10 * time.Second)
		for seen.Load() < want {
			if time.Now().After(deadline) {
				return Row{}, fmt.Errorf("watch: only %d of %d watchers saw event %s within 10s", seen.Load()-want+total, total, rv)
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for _, w := range watchers {
		_ = w.body.Close()
	}
	wg.Wait()
	var samples [numTargets][]time.Duration
	for _, w := range watchers {
		for _, a := range w.arrivals {
			if t0, ok := sent[a.rv]; ok {
				samples[w.target] = append(samples[w.target], a.at.Sub(t0))
			}
		}
	}
	r := Row{Section: "Reads", Name: fmt.Sprintf("WATCH event latency, %d watchers per column", n), Kind: goalRead}
	for i := range samples {
		r.S[i] = Summarize(samples[i])
		// Throughput of a watch is events delivered per second per watcher
		// stream; not comparable to request rates, so left out.
		r.S[i].OpsPerSec = 0
	}
	r.Note = fmt.Sprintf("%d events × %d watchers per column; from sending the change (directly) to the event's arrival", h.cfg.WatchEvents, n)
	logf("%-52s direct %7.2f  bare %7.2f  kausality %7.2f ms p50", r.Name, r.S[direct].P50, r.S[bare].P50, r.S[kausality].P50)
	return r, nil
}

// WatchMemory is a proxy's memory with many open watches.
type WatchMemory struct {
	Watches                     int
	Before, After               Stats
	RSSPerWatch, HeapPerWatch   float64 // bytes
	StackPerWatch               float64
	GoroutinesPerWatch          float64
	HeapProfile, HeapProfileTop string
}

// openWatchesMemory opens n watches through t, lets them settle, and reads
// the proxy's memory (after a GC) before and with them.
func (h *Harness) openWatchesMemory(ctx context.Context, t *target, n int, heapProfile string) (WatchMemory, error) {
	m := WatchMemory{Watches: n}
	cm, err := h.admin.CoreV1().ConfigMaps(nsWatch).Get(ctx, "watch-target", metav1.GetOptions{})
	if err != nil {
		return m, err
	}
	time.Sleep(time.Second)
	if m.Before, err = t.ctl.GC(ctx); err != nil {
		return m, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		bodies []io.ReadCloser
		mu     sync.Mutex
		seen   atomic.Int64
		wg     sync.WaitGroup
	)
	err = parallel(ctx, 16, n, func(int) error {
		body, err := openWatch(wctx, t, cm.ResourceVersion)
		if err != nil {
			return err
		}
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); (&watcher{body: body}).read(&seen) }()
		return nil
	})
	defer func() {
		cancel()
		for _, b := range bodies {
			_ = b.Close()
		}
		wg.Wait()
	}()
	if err != nil {
		return m, err
	}
	// One event through all of them, so every stream has carried data.
	want := seen.Load() + int64(n)
	if _, _, err := h.bump(ctx); err != nil {
		return m, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for seen.Load() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if seen.Load() < want {
		return m, fmt.Errorf("only %d of %d watches through %s delivered an event", seen.Load()-want+int64(n), n, t.name)
	}
	time.Sleep(2 * time.Second)
	if m.After, err = t.ctl.GC(ctx); err != nil {
		return m, err
	}
	if heapProfile != "" {
		if err := fetch(ctx, t.ctl.base+"/debug/pprof/heap", heapProfile); err != nil {
			return m, err
		}
		m.HeapProfile = heapProfile
	}
	f := float64(n)
	m.RSSPerWatch = float64(m.After.RSS-m.Before.RSS) / f
	m.HeapPerWatch = (float64(m.After.HeapInuse) - float64(m.Before.HeapInuse)) / f
	m.StackPerWatch = (float64(m.After.StackInuse) - float64(m.Before.StackInuse)) / f
	m.GoroutinesPerWatch = float64(m.After.Goroutines-m.Before.Goroutines) / f
	logf("%d watches via %s: RSS %.1f -> %.1f MiB (%.1f KiB/watch), heap %.1f KiB/watch, stack %.1f KiB/watch, %.1f goroutines/watch",
		n, t.name, mib(m.Before.RSS), mib(m.After.RSS), m.RSSPerWatch/1024, m.HeapPerWatch/1024, m.StackPerWatch/1024, m.GoroutinesPerWatch)
	return m, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
