package main

import (
	"strings"
	"testing"
	"time"
)

// These test the harness's arithmetic and parsing only. Nothing here (or
// anywhere) asserts a measured time.

func TestSummarizeNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	got := Summarize(s)
	if got.N != 100 || got.P50 != 50 || got.P99 != 99 || got.Mean != 50.5 {
		t.Errorf("Summarize = %+v; want n=100 p50=50 p99=99 mean=50.5", got)
	}
	if one := Summarize([]time.Duration{3 * time.Millisecond}); one.P50 != 3 || one.P99 != 3 {
		t.Errorf("one sample: %+v", one)
	}
	if empty := Summarize(nil); empty.N != 0 {
		t.Errorf("no samples: %+v", empty)
	}
}

func TestOrdersArePermutations(t *testing.T) {
	seen := map[[3]int]bool{}
	first := map[int]int{}
	for _, o := range orders {
		if seen[o] {
			t.Errorf("order %v twice", o)
		}
		seen[o] = true
		first[o[0]]++
		if o[0]+o[1]+o[2] != 3 || o[0] == o[1] || o[1] == o[2] || o[0] == o[2] {
			t.Errorf("%v is not a permutation of 0,1,2", o)
		}
	}
	for idx := 0; idx < numTargets; idx++ {
		if first[idx] != 2 {
			t.Errorf("target %d goes first %d times in 6 iterations; want 2", idx, first[idx])
		}
	}
}

func TestParseMicro(t *testing.T) {
	out := `goos: linux
pkg: github.com/kausality-io/kausality-proxy/intercept
BenchmarkServe/UpdateExpected-2   2428   96051 ns/op   1.000 forwarded/op   0 upstream/op   60429 B/op   650 allocs/op
BenchmarkServe/UpdateExpected-2   2500   90000 ns/op   1.000 forwarded/op   0 upstream/op   60000 B/op   640 allocs/op
BenchmarkServe/UpdateExpected-2   2500   99000 ns/op   1.000 forwarded/op   0 upstream/op   61000 B/op   660 allocs/op
PASS
pkg: github.com/kausality-io/kausality-proxy/authn
BenchmarkSanitizeInbound/Typical-2   238468   986.5 ns/op   80 B/op   1 allocs/op
`
	got := parseMicro(strings.NewReader(out))
	if len(got) != 2 {
		t.Fatalf("got %d results, want 2: %+v", len(got), got)
	}
	u := got[0]
	if u.Name != "BenchmarkServe/UpdateExpected" || !strings.HasSuffix(u.Pkg, "/intercept") {
		t.Errorf("first: %s %s", u.Pkg, u.Name)
	}
	if u.Metrics["ns/op"] != 96051 || u.Metrics["allocs/op"] != 650 || u.Metrics["upstream/op"] != 0 {
		t.Errorf("median of three runs: %v", u.Metrics)
	}
	if got[1].Metrics["ns/op"] != 986.5 || got[1].Metrics["B/op"] != 80 {
		t.Errorf("second: %v", got[1].Metrics)
	}
}

func TestVerdicts(t *testing.T) {
	read := Row{Kind: goalRead}
	read.S[direct] = Summary{P50: 1, P99: 2}
	read.S[bare] = Summary{P50: 1.3, P99: 2.4}
	read.S[kausality] = Summary{P50: 1.35, P99: 2.5}
	if ok, v := read.verdict(); ok || v != "❌ vs direct, ✅ vs bare" {
		t.Errorf("read verdict %v %q", ok, v)
	}
	write := Row{Kind: goalInterceptedWrite, Upstream: &UpstreamUse{Calls: 10, Forwarded: 10, Own: map[string]int64{"watch replicasets": 1}}}
	write.S[direct] = Summary{P50: 2}
	write.S[kausality] = Summary{P50: 2.9}
	if ok, _ := write.verdict(); !ok {
		t.Error("a write 0.9 ms slower without own requests (watches do not count) meets the goal")
	}
	write.Upstream.Own["get deployments"] = 10
	if ok, v := write.verdict(); ok || v != "❌ extra round trip" {
		t.Errorf("live GETs: %v %q", ok, v)
	}
}

func TestRoundRatiosAreTheExtremesOfSingleRounds(t *testing.T) {
	var l Load
	l.RoundCPU[bare] = []time.Duration{100, 100, 200}
	l.RoundCPU[kausality] = []time.Duration{150, 120, 360}
	lo, hi, ok := l.RoundRatios()
	if !ok || lo != 1.2 || hi != 1.8 {
		t.Errorf("RoundRatios = %v, %v, %v; want 1.2, 1.8, true", lo, hi, ok)
	}
	l.RoundCPU[bare] = l.RoundCPU[bare][:2]
	if _, _, ok := l.RoundRatios(); ok {
		t.Error("rounds of unequal count must not give a spread")
	}
	if _, _, ok := (Load{}).RoundRatios(); ok {
		t.Error("no rounds must not give a spread")
	}
}
