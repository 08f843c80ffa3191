package main

import (
	"testing"
	"time"
)

func TestGCShare(t *testing.T) {
	const mib = 1 << 20
	cycle := 40 * time.Millisecond
	tests := []struct {
		name       string
		start, end Stats
		want       time.Duration
	}{
		{"half the live heap allocated: half a collection is due",
			Stats{TotalAlloc: 100 * mib}, Stats{TotalAlloc: 150 * mib, HeapAlloc: 100 * mib, GCPercent: 100}, 20 * time.Millisecond},
		{"a collection that ran is not charged again",
			Stats{TotalAlloc: 100 * mib, NumGC: 7}, Stats{TotalAlloc: 250 * mib, HeapAlloc: 100 * mib, NumGC: 8, GCPercent: 100}, 20 * time.Millisecond},
		{"more collections ran than were due: nothing more",
			Stats{TotalAlloc: 100 * mib, NumGC: 7}, Stats{TotalAlloc: 110 * mib, HeapAlloc: 100 * mib, NumGC: 9, GCPercent: 100}, 0},
		{"GOGC=200 collects half as often",
			Stats{}, Stats{TotalAlloc: 100 * mib, HeapAlloc: 100 * mib, GCPercent: 200}, 20 * time.Millisecond},
		{"GOGC=off never collects",
			Stats{}, Stats{TotalAlloc: 100 * mib, HeapAlloc: 100 * mib, GCPercent: -1}, 0},
		{"no heap read", Stats{}, Stats{TotalAlloc: 100 * mib, GCPercent: 100}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gcShare(tt.start, tt.end, cycle); got != tt.want {
				t.Errorf("gcShare = %s, want %s", got, tt.want)
			}
		})
	}
}
