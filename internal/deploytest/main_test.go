package deploytest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

// cp is the control plane the tests that need a cluster share. Tests that
// need a fresh one (the dry runs) start their own.
var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var err error
	cp, err = testenv.Start(ctx, testenv.Options{})
	cancel()
	if err != nil {
		// Never skip: a missing control plane is a failure.
		fmt.Fprintf(os.Stderr, "FAIL: starting the local control plane: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	stopInstall()
	_ = cp.Stop()
	if binaryPath != "" {
		_ = os.RemoveAll(filepath.Dir(binaryPath))
	}
	os.Exit(code)
}
