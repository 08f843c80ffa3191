// Package framework runs kausality-proxy in front of a cluster for the e2e
// scenarios. Scenarios are written against Cluster, so the same test code
// runs on the local provider (a real etcd, kube-apiserver and
// kube-controller-manager from ./bin, the CI default) and on other providers.
package framework

import (
	"context"

	"k8s.io/client-go/rest"
)

// Cluster is what a scenario needs from a cluster provider.
type Cluster interface {
	// Direct is a cluster-admin config straight to kube-apiserver, for setup
	// and for assertions that must not depend on the proxy.
	Direct() *rest.Config
	// UserThroughProxy is a client-certificate identity with the given
	// groups that talks to the proxy.
	UserThroughProxy(name string, groups ...string) (*rest.Config, error)
	// ServiceAccountThroughProxy is a bearer-token identity for the service
	// account namespace/name (created if missing) that talks to the proxy.
	ServiceAccountThroughProxy(ctx context.Context, namespace, name string) (*rest.Config, error)
	// ControllerManagerLog returns what kube-controller-manager, running
	// through the proxy, has logged so far.
	ControllerManagerLog() (string, error)
}
