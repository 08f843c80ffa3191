//go:build kind

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// With -tags kind (`make e2e-kind`) the shared scenarios run on a kind
// cluster: the proxy deployed from manifests/overlays/kind-e2e and the
// cluster's own kube-controller-manager repointed at it. Without Docker
// this fails, saying so; it never skips.
//
//	KIND_CLUSTER         the cluster's name (default kausality-e2e; must not exist)
//	KIND_NODE_IMAGE      the kindest/node image (default: the kind library's)
//	KAUSALITY_KIND_KEEP  non-empty: keep the cluster afterwards
func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	k, err := framework.StartKind(ctx, framework.KindOptions{
		ClusterName: os.Getenv("KIND_CLUSTER"),
		NodeImage:   os.Getenv("KIND_NODE_IMAGE"),
		Keep:        os.Getenv("KAUSALITY_KIND_KEEP") != "",
	})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting the kind cluster: %v\n", err)
		os.Exit(1)
	}
	cluster = k
	code := m.Run()
	if code != 0 {
		printProxyLogTail()
	}
	k.Stop()
	os.Exit(code)
}
