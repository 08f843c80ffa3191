package main

import (
	"math"
	"sort"
	"time"
)

// Summary condenses the samples of one operation against one target.
type Summary struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	// OpsPerSec is sequential throughput: samples divided by the time
	// spent in them (one request in flight), unless a load phase set it.
	OpsPerSec float64 `json:"ops_per_sec"`
}

// Summarize computes nearest-rank percentiles (p99 of 100 samples is the
// 99th smallest), the mean and sequential throughput.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var total time.Duration
	for _, d := range s {
		total += d
	}
	return Summary{
		N:         len(s),
		P50:       ms(percentile(s, 50)),
		P99:       ms(percentile(s, 99)),
		Mean:      ms(total) / float64(len(s)),
		OpsPerSec: float64(len(s)) / total.Seconds(),
	}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is a/b, or NaN when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// orders are the six permutations of the three targets. Iteration i runs
// the targets in orders[i%6], so that no target is always first (cold) or
// last (behind the others' garbage).
var orders = [6][3]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {2, 1, 0}, {1, 0, 2}}
