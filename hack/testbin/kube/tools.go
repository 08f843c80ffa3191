//go:build tools

// Package tools pins the control-plane binaries that the test harness runs.
// `make testbin` builds them from these module versions; nothing here is
// imported by the product.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
