// Package seriesmemo keeps the Prometheus series each set of label values
// resolved to. Finding a series by its label values (WithLabelValues)
// hashes and checks every value; a metric observed on every request pays
// that once per label set instead.
//
// A memo grows with the label sets it has seen, so it is only as bounded
// as the labels: keys must be made of bounded values, never of a caller's
// raw input.
package seriesmemo

import "sync"

// Memo maps a key of label values to the series it resolved to.
type Memo[K comparable, S any] struct {
	resolved sync.Map // K -> S
	resolve  func(K) S
}

// New returns a memo that resolves a key it has not seen with resolve.
func New[K comparable, S any](resolve func(K) S) *Memo[K, S] {
	return &Memo[K, S]{resolve: resolve}
}

// For returns the series of k, resolved at most once per key but for a
// race of first lookups, whose losers' series are dropped (resolving one
// twice is harmless: it names the same series).
func (m *Memo[K, S]) For(k K) S {
	if s, ok := m.resolved.Load(k); ok {
		return s.(S)
	}
	s, _ := m.resolved.LoadOrStore(k, m.resolve(k))
	return s.(S)
}
