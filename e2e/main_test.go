package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// env is the cluster every scenario in this package runs against: the local
// provider with kube-controller-manager running through the proxy.
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
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "proxy log: %s\nkube-apiserver log: %s\n", env.LogPath, env.CP.APIServerLogPath)
	}
	env.Stop()
	os.Exit(code)
}
