//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// When kube-apiserver goes away the proxy answers 503 with a Status and its
// /readyz fails; when it comes back, requests work again without a restart.
func TestUpstreamOutage(t *testing.T) {
	cfg, err := env.UserThroughProxy("outage", "system:masters")
	mustf(t, err, "user")
	cfg.Timeout = 20 * time.Second // a hang guard, not a performance assertion
	client := clientFor(t, cfg)
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("before the outage: %v", err)
	}

	env.Relay.Down()
	restored := false
	defer func() {
		if !restored {
			_ = env.Relay.Up()
		}
	}()

	req, _ := http.NewRequest(http.MethodGet, env.ProxyURL+"/api/v1/namespaces/default", nil)
	resp, err := rawClient(t, certOf(t, cfg)).Do(req)
	mustf(t, err, "request during outage")
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("during the outage: %d %s, want 503", resp.StatusCode, data)
	}
	s := decodeStatus(t, data)
	if s.Reason != metav1.StatusReasonServiceUnavailable || s.Code != 503 {
		t.Fatalf("status %+v", s)
	}
	// client-go sees a typed error it knows to retry.
	_, err = client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("client-go during the outage: %v, want ServiceUnavailable", err)
	}
	eventually(t, 30*time.Second, "/readyz fails", func() error {
		if code := readyz(t); code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d", code)
		}
		return nil
	})
	if code := httpStatus(t, env.MetricsURL+"/livez"); code != http.StatusOK {
		t.Fatalf("/livez %d during the outage; the process is alive", code)
	}

	mustf(t, env.Relay.Up(), "restoring upstream")
	restored = true
	eventually(t, 60*time.Second, "requests succeed again", func() error {
		_, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	eventually(t, 30*time.Second, "/readyz recovers", func() error {
		if code := readyz(t); code != http.StatusOK {
			return fmt.Errorf("/readyz %d", code)
		}
		return nil
	})
}

func readyz(t *testing.T) int { return httpStatus(t, env.MetricsURL+"/readyz") }

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	mustf(t, err, "GET %s", url)
	resp.Body.Close()
	return resp.StatusCode
}
