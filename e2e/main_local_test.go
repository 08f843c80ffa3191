//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// env is the local provider (the default build, and CI's): a real control
// plane from ./bin with the proxy in-process and kube-controller-manager
// running through the proxy. Shared scenarios use cluster (the same
// object, as a framework.Cluster); the scenarios in files built with
// !kind use env's local-only parts (the Relay, the Recorder, the proxy's
// Settings).
var env *framework.Local

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var err error
	env, err = framework.StartLocal(ctx, framework.LocalOptions{AuditLog: true, ControllerManager: true})
	cancel()
	if err != nil {
		// Never skip: a missing control plane is a failure.
		fmt.Fprintf(os.Stderr, "FAIL: starting the local cluster: %v\n", err)
		os.Exit(1)
	}
	cluster = env
	code := m.Run()
	if code != 0 {
		printProxyLogTail()
	}
	env.Stop()
	os.Exit(code)
}
