// Package framework runs kausality-proxy in front of a cluster for the e2e
// scenarios. Scenarios are written against Cluster, so the same test code
// runs on the local provider (Local: a real etcd, kube-apiserver and
// kube-controller-manager from ./bin with the proxy in-process, the CI
// default) and on the kind provider (Kind: a kind cluster with the proxy
// deployed from manifests/ and kube-controller-manager repointed at it).
package framework

import (
	"context"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// Cluster is what a scenario needs from a cluster provider.
type Cluster interface {
	// Direct is a cluster-admin config straight to kube-apiserver, for setup
	// and for assertions that must not depend on the proxy.
	Direct() *rest.Config
	// UserThroughProxy is a client-certificate identity with the given
	// groups that talks to the proxy. The certificate is signed by a CA the
	// proxy trusts (--client-ca-file), so the proxy impersonates the user
	// upstream.
	UserThroughProxy(name string, groups ...string) (*rest.Config, error)
	// ServiceAccountThroughProxy is a bearer-token identity for the service
	// account namespace/name (created if missing) that talks to the proxy.
	ServiceAccountThroughProxy(ctx context.Context, namespace, name string) (*rest.Config, error)
	// ProxyEndpoint is where the test process reaches the proxy, for raw
	// HTTP requests.
	ProxyEndpoint() Endpoint
	// ProxyLog is everything the proxy has logged so far (zap JSON lines),
	// oldest first.
	ProxyLog() ([]byte, error)
	// Decisions are the "kausality decision" lines of ProxyLog, oldest
	// first. A later call returns a list that starts with the lines of an
	// earlier one, so an index into it is a mark.
	Decisions() ([]DecisionLine, error)
	// DriftReports returns the DriftReports the proxy delivered about one
	// child object, in arrival order.
	DriftReports(namespace, child string) ([]v1alpha1.DriftReport, error)
	// SetConfig replaces the proxy's --config file and waits until the
	// running proxy has loaded it. It fails when the proxy keeps the old one.
	SetConfig(ctx context.Context, content string) error
	// ControllerManagerLog returns what kube-controller-manager, running
	// through the proxy, has logged so far.
	ControllerManagerLog() (string, error)
	// AuditEvents returns kube-apiserver's audit log (every request at the
	// Metadata level) written so far.
	AuditEvents() ([]auditv1.Event, error)
}

// Endpoint is where the test process reaches the proxy.
type Endpoint struct {
	// URL is the proxy's secure port, https://HOST:PORT.
	URL string
	// CAData is the PEM CA that verifies the proxy's serving certificate
	// for URL's host.
	CAData []byte
	// MetricsURL is the proxy's metrics port, http://HOST:PORT (/metrics,
	// /healthz, /livez and /readyz).
	MetricsURL string
}

// BaseConfig is the proxy configuration every provider starts with and that
// scenarios restore after changing it: the defaults, spelled out.
const BaseConfig = `apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
`
