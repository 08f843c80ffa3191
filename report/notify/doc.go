// Package notify defines the DriftReport (kausality.io/v1alpha1), builds it
// from a decided write with a Secret's values redacted, and posts it to a
// receiver. Which reports go out, when, and from which replica is decided
// by package drifts.
package notify
