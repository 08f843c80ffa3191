package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
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
		// The work dir goes away with Stop; keep the evidence in the output.
		if data, err := os.ReadFile(env.LogPath); err == nil {
			lines := strings.Split(string(data), "\n")
			if len(lines) > 80 {
				lines = lines[len(lines)-80:]
			}
			fmt.Fprintf(os.Stderr, "--- last lines of the proxy log:\n%s\n", strings.Join(lines, "\n"))
		}
	}
	env.Stop()
	os.Exit(code)
}
