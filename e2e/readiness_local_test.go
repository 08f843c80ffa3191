//go:build !kind

package e2e

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A replica says it is ready only once it decides as it would with
// complete information. Started while kube-apiserver cannot be reached, it
// is not ready; when kube-apiserver comes back, its informers are still
// backing off from the failed lists while its upstream probe already
// succeeds. The first write after its first ready answer must already see
// the controller's approval policy: a drift the policy approves is
// approved, not denied as unapproved.
func TestReplicaReadyOnlyOnceItsPolicyCachesSynced(t *testing.T) {
	f := polFamily(t, "ready-pol", map[string]string{"dev": "dev"})
	setPolicy(t, f, polRule(f, prereqDev, future()))
	f.settle("Allow/DriftApprovedByPolicy", func() error { _, err := f.setValue("dev", "v9", true); return err })

	apiserver, err := url.Parse(env.CP.Host)
	mustf(t, err, "kube-apiserver's address")
	relay, err := framework.NewRelay(apiserver.Host)
	mustf(t, err, "a relay to kube-apiserver")
	relay.Down()
	t.Cleanup(relay.Down)
	replica, err := env.StartReplica(context.Background(), framework.ReplicaOptions{Upstream: relay.Addr(), NoWaitReady: true})
	mustf(t, err, "a replica behind the relay")
	t.Cleanup(replica.Stop)

	readyz := func() int {
		c := &http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(replica.MetricsURL + "/readyz")
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code := readyz(); code == http.StatusOK {
			t.Fatalf("the replica reported ready while it could not reach kube-apiserver")
		}
	}

	mustf(t, relay.Up(), "bringing kube-apiserver back for the replica")
	for end := time.Now().Add(2 * time.Minute); readyz() != http.StatusOK; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the replica did not become ready in 2 minutes after kube-apiserver came back (log %s)", replica.LogPath)
		}
	}
	ctrl := wgNewActor(t, replica.Through(f.ctrl.cfg), wgControllerUser)
	_, err = f.writeGadget(ctrl, "dev", true, func(g *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(g.Object, "v7", "spec", "value")
	})
	if got := wgCategory(err, ctrl.warnings.take()); got != "Allow/DriftApprovedByPolicy" {
		t.Fatalf("the first write after the replica reported ready was decided %s: it was ready before its policy caches had synced", got)
	}
}
