package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Row is one line of the latency table.
type Row struct {
	Section string
	Name    string
	S       [numTargets]Summary
	// Upstream is what kausality-proxy sent to kube-apiserver during the
	// measured iterations (warm-up excluded), per call.
	Upstream *UpstreamUse
	// Kind selects the goal the row is judged by.
	Kind goalKind
	Note string
}

type goalKind int

const (
	goalNone goalKind = iota
	goalRead
	goalInterceptedWrite
)

// UpstreamUse is kausality-proxy's upstream traffic during a row.
type UpstreamUse struct {
	Calls     int
	Forwarded int64
	Own       map[string]int64
}

// OwnTotal counts the proxy's own requests, long-running watches excluded
// (informers keep those open in the background).
func (u *UpstreamUse) OwnTotal() int64 {
	var n int64
	for k, v := range u.Own {
		if !strings.HasPrefix(k, "watch ") {
			n += v
		}
	}
	return n
}

func (u *UpstreamUse) String() string {
	if u == nil || u.Calls == 0 {
		return ""
	}
	s := fmt.Sprintf("%.2f fwd", float64(u.Forwarded)/float64(u.Calls))
	keys := make([]string, 0, len(u.Own))
	for k, v := range u.Own {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		s += fmt.Sprintf(" + %.2f %s", float64(u.Own[k])/float64(u.Calls), k)
	}
	return s
}

func diffUse(before, after Stats, calls int) *UpstreamUse {
	u := &UpstreamUse{Calls: calls, Forwarded: after.Forwarded - before.Forwarded, Own: map[string]int64{}}
	for k, v := range after.Own {
		if d := v - before.Own[k]; d != 0 {
			u.Own[k] = d
		}
	}
	return u
}

// opFunc runs iteration i of an operation against t and returns the time of
// the request(s) it times.
type opFunc func(ctx context.Context, t *target, i int) (time.Duration, error)

// measure runs warm-up iterations, then n measured ones; every iteration
// runs the operation once against each target, in a rotating order.
func (h *Harness) measure(ctx context.Context, targets [numTargets]*target, n, warm int, op opFunc) ([numTargets][]time.Duration, *UpstreamUse, error) {
	var samples [numTargets][]time.Duration
	var before Stats
	k := h.targets[kausality].ctl
	for i := -warm; i < n; i++ {
		if i == 0 {
			var err error
			if before, err = k.Stats(ctx); err != nil {
				return samples, nil, err
			}
		}
		for _, idx := range orders[(i+warm)%len(orders)] {
			d, err := op(ctx, targets[idx], i)
			if err != nil {
				return samples, nil, err
			}
			if i >= 0 {
				samples[idx] = append(samples[idx], d)
			}
		}
	}
	after, err := k.Stats(ctx)
	if err != nil {
		return samples, nil, err
	}
	return samples, diffUse(before, after, n), nil
}

func (h *Harness) row(ctx context.Context, section, name string, kind goalKind, n, warm int, op opFunc) (Row, error) {
	return h.rowWith(ctx, h.targets, section, name, kind, n, warm, op)
}

func (h *Harness) rowWith(ctx context.Context, targets [numTargets]*target, section, name string, kind goalKind, n, warm int, op opFunc) (Row, error) {
	start := time.Now()
	samples, use, err := h.measure(ctx, targets, n, warm, op)
	if err != nil {
		return Row{}, fmt.Errorf("%s: %w", name, err)
	}
	r := Row{Section: section, Name: name, Kind: kind, Upstream: use}
	for i := range samples {
		r.S[i] = Summarize(samples[i])
	}
	logf("%-52s direct %7.2f  bare %7.2f  kausality %7.2f ms p50  (%s)", name, r.S[direct].P50, r.S[bare].P50, r.S[kausality].P50, time.Since(start).Round(time.Millisecond))
	return r, nil
}

// reads measures GET, LIST and the large LIST.
func (h *Harness) reads(ctx context.Context) ([]Row, error) {
	const section = "Reads"
	rc := h.cfg
	var rows []Row
	get := func(ctx context.Context, t *target, i int) (time.Duration, error) {
		r, err := t.do(ctx, req{method: http.MethodGet, path: "/api/v1/namespaces/" + nsRead + "/configmaps/get-target"})
		return r.elapsed, err
	}
	r, err := h.row(ctx, section, "GET one ConfigMap (client certificate)", goalRead, rc.GetN, rc.Warmup*4, get)
	if err != nil {
		return nil, err
	}
	rows = append(rows, r)
	r, err = h.rowWith(ctx, h.tokenTargets, section, "GET one ConfigMap (bearer token, cached TokenReview)", goalRead, rc.GetN/2, rc.Warmup*4, get)
	if err != nil {
		return nil, err
	}
	rows = append(rows, r)

	var listBytes [2]int64
	list := func(ns, accept string, size *int64) opFunc {
		return func(ctx context.Context, t *target, i int) (time.Duration, error) {
			r, err := t.do(ctx, req{method: http.MethodGet, path: "/api/v1/namespaces/" + ns + "/configmaps", accept: accept, discard: true})
			*size = r.bytes
			return r.elapsed, err
		}
	}
	r, err = h.row(ctx, section, fmt.Sprintf("LIST %d ConfigMaps, JSON", rc.ListObjects), goalRead, rc.ListN, 2, list(nsList, "application/json", &listBytes[0]))
	if err != nil {
		return nil, err
	}
	r.Note = fmt.Sprintf("%.1f MB per response", float64(listBytes[0])/1e6)
	rows = append(rows, r)
	r, err = h.row(ctx, section, fmt.Sprintf("LIST %d ConfigMaps, protobuf", rc.ListObjects), goalRead, rc.ListN, 2,
		list(nsList, "application/vnd.kubernetes.protobuf", &listBytes[1]))
	if err != nil {
		return nil, err
	}
	r.Note = fmt.Sprintf("%.1f MB per response", float64(listBytes[1])/1e6)
	rows = append(rows, r)
	var big int64
	r, err = h.row(ctx, section, fmt.Sprintf("LIST %d ConfigMaps of 1 MB, JSON", rc.BigObjects), goalRead, rc.BigListN, 1, list(nsBig, "application/json", &big))
	if err != nil {
		return nil, err
	}
	r.Note = fmt.Sprintf("%.1f MiB per response", float64(big)/(1<<20))
	rows = append(rows, r)
	return rows, nil
}

// upgrade measures an exec handshake: a new HTTP/1.1 connection, an
// upgrade request, and kube-apiserver's 400 (the pod has no node), which
// through kausality-proxy is a full round trip through
// UpgradeAwareHandler.
func (h *Harness) upgrade(ctx context.Context) (Row, error) {
	hdr := http.Header{
		"Connection":                {"Upgrade"},
		"Upgrade":                   {"SPDY/3.1"},
		"X-Stream-Protocol-Version": {"v4.channel.k8s.io", "v3.channel.k8s.io"},
	}
	op := func(ctx context.Context, t *target, i int) (time.Duration, error) {
		r, err := t.do(ctx, req{
			method: http.MethodPost, path: "/api/v1/namespaces/" + nsExec + "/pods/exec-target/exec?command=true&stdout=true&container=c",
			header: hdr, upgrade: true, want: http.StatusBadRequest,
		})
		return r.elapsed, err
	}
	r, err := h.row(ctx, "Upgrade", "exec handshake (new TLS connection, SPDY upgrade, 400)", goalNone, h.cfg.UpgradeN, h.cfg.Warmup, op)
	if r.Upstream != nil && r.Upstream.OwnTotal() == 0 {
		// Upgrades bypass WrapUpstreamTransport (UpgradeAwareHandler dials
		// itself), so there is nothing to show.
		r.Upstream = nil
	}
	r.Note = "HTTP/1.1; a new connection per handshake, like kubectl exec; kausality-proxy dials a new upstream connection per upgrade (UpgradeAwareHandler)"
	return r, err
}
