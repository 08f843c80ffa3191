//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A proxy started against a cluster without its namespace, as one run
// outside the cluster against a cluster nobody prepared: it says it is not
// ready, naming the namespace and the flag, and the drift it denies
// meanwhile is not dropped. Once the namespace exists the proxy is ready
// and the receiver gets the report.
func TestProxyWithoutItsNamespace(t *testing.T) {
	rig := newDriftRig(t, "nsless", 0, nil)
	missing := "kausality-missing-" + rand.String(5)
	rig.opts.Drifts = framework.DriftTimings(missing)
	rig.opts.NoWaitReady = true
	replica := rig.start()

	eventually(t, 60*time.Second, "/readyz names the missing namespace and the flag", func() error {
		code, body := readyzOf(replica.MetricsURL)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, fmt.Sprintf("namespace %q does not exist", missing)) ||
			!strings.Contains(body, "--drift-namespace") {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})

	// The write path still decides: the drift is denied, and its report
	// waits for the namespace.
	rig.drift(0, "drifted")
	rig.drift(0, "drifted")
	time.Sleep(5 * time.Second) // several record attempts without the namespace
	if got := rig.reports(v1alpha1.PhaseDetected); len(got) != 0 {
		t.Fatalf("a report was delivered without the proxy's namespace: %+v", got)
	}
	if v := metricValue(t, replica.MetricsURL, `kausality_proxy_driftreports_dropped_total{reason="record_failed"}`); v != "0" {
		t.Fatalf("drift reports dropped while the namespace is missing: %s", v)
	}
	log, err := replica.Log()
	mustf(t, err, "reading the replica's log")
	if !strings.Contains(string(log), "--drift-namespace") {
		t.Fatalf("the replica's log never names --drift-namespace:\n%s", log)
	}

	admin := directClient(t)
	_, err = admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: missing}}, metav1.CreateOptions{})
	mustf(t, err, "creating the proxy's namespace %s", missing)
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), missing, metav1.DeleteOptions{}) })

	eventually(t, 60*time.Second, "/readyz ok once the namespace exists", func() error {
		if code, body := readyzOf(replica.MetricsURL); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	det := rig.detected(90 * time.Second)
	if det.Spec.Parent.Name != rig.f.widget || det.Spec.Request.User != wgControllerUser {
		t.Fatalf("Detected report %+v", det.Spec)
	}
	if v := metricValue(t, replica.MetricsURL, `kausality_proxy_driftreports_dropped_total{reason="record_failed"}`); v != "0" {
		t.Fatalf("drift reports dropped: %s", v)
	}
}

// readyzOf returns the code and body of a proxy's /readyz.
func readyzOf(metricsURL string) (int, string) {
	resp, err := http.Get(metricsURL + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
