//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// An entry of the config file whose kind kube-apiserver does not serve
// matches nothing, without a word: the proxy looks the kinds up once it
// has discovery, and counts those it cannot find (the log names each).
// A kind in another case is one, and so is a custom kind whose definition
// is not installed; the file's other kinds are served.
func TestTheProxyCountsKindsItsConfigNamesThatAreNotServed(t *testing.T) {
	const gauge = "kausality_proxy_config_unserved_kinds"
	wgSetup(t)
	setConfig(t, framework.BaseConfig+fmt.Sprintf(`ungatedChildKinds:
- kind: pod
- apiGroup: %s
  kind: Gadget
- apiGroup: backup.example.com
  kind: BackupAttempt
`, framework.TestGroup))
	eventually(t, 30*time.Second, "the proxy counts the two kinds it cannot find", func() error {
		if got := metricValue(t, env.MetricsURL, gauge); got != "2" {
			return fmt.Errorf("%s = %q", gauge, got)
		}
		return nil
	})
	// setConfig's cleanup puts the base file back after the test.
	mustf(t, cluster.SetConfig(context.Background(), framework.BaseConfig+fmt.Sprintf("ungatedChildKinds:\n- kind: Pod\n- apiGroup: %s\n  kind: Gadget\n", framework.TestGroup)),
		"loading a file whose kinds are all served")
	eventually(t, 30*time.Second, "a file whose kinds are all served counts none", func() error {
		if got := metricValue(t, env.MetricsURL, gauge); got != "0" {
			return fmt.Errorf("%s = %q", gauge, got)
		}
		return nil
	})
}
