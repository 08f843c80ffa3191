//go:build !kind

package e2e

// Scenarios of rollout_test.go that need the local provider's insides: the
// Recorder that sees the bytes the proxy sends upstream, and the in-process
// proxy's Settings and --config file path.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A writer in shadow mode is decided and logged, and its request reaches
// kube-apiserver exactly as sent: the same bytes, no annotation added, no
// warning returned, nothing denied.
func TestShadowForwardsBytesUnchanged(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "shadow", "enforce")
	setConfig(t, fmt.Sprintf(`apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
controllers:
- name: shadow-writer
  match:
    serviceAccount: %s/shadow-writer
  mode: shadow
`, ns))
	// The writers need RBAC for configmaps; bind before anything else so
	// the authorizer has seen the bindings by the time they write.
	admin := clientFor(t, cluster.Direct())
	shadowCfg, err := cluster.ServiceAccountThroughProxy(ctx, ns, "shadow-writer")
	mustf(t, err, "shadow writer")
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, editBinding(ns, "shadow-writer"), metav1.CreateOptions{})
	mustf(t, err, "binding")
	otherCfg, err := cluster.ServiceAccountThroughProxy(ctx, ns, "enforced-writer")
	mustf(t, err, "enforced writer")
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, editBinding(ns, "enforced-writer"), metav1.CreateOptions{})
	mustf(t, err, "binding")

	aliceCfg, err := cluster.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "alice")
	alice := clientFor(t, aliceCfg)
	d, _ := stableDeployment(t, alice, ns, "web")
	// Freeze the Deployment: every write to its children would be denied.
	_, err = alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"kausality.io/freeze":"true"}}}`), metav1.PatchOptions{})
	mustf(t, err, "freezing")

	// Odd but valid JSON: extra spaces and key order a re-encoder would change.
	marker := "shadow-cm"
	body := []byte(fmt.Sprintf(`{"kind":"ConfigMap",  "apiVersion":"v1","metadata":{"name":"%s","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"%s","controller":true}]},"data":{"z":"1",  "a":"2"}}`, marker, d.UID))
	env.Recorder.Watch(marker)
	env.Recorder.Watch("/namespaces/" + ns + "/configmaps")

	post := func(cfg string, token string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, cluster.ProxyEndpoint().URL+"/api/v1/namespaces/"+ns+"/configmaps?fieldManager=shadow-writer", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := rawClient(t, nil).Do(req)
		mustf(t, err, "post as %s", cfg)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, data
	}
	resp, data := post("shadow-writer", shadowCfg.BearerToken)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("shadow write: %d %s", resp.StatusCode, data)
	}
	if w := resp.Header.Values("Warning"); len(w) != 0 {
		t.Fatalf("shadow mode added warnings: %q", w)
	}
	var sent []framework.Recorded
	for _, r := range env.Recorder.Requests("/namespaces/" + ns + "/configmaps") {
		if r.Method == http.MethodPost {
			sent = append(sent, r)
		}
	}
	if len(sent) != 1 || !bytes.Equal(sent[0].Body, body) {
		t.Fatalf("kube-apiserver did not receive the caller's bytes:\n sent %q\n  got %v", body, sent)
	}
	cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, marker, metav1.GetOptions{})
	mustf(t, err, "get")
	for k := range cm.Annotations {
		if strings.HasPrefix(k, "kausality.io/") {
			t.Fatalf("shadow write got annotation %s", k)
		}
	}
	lines := decisionsFor(t, "configmaps", ns, marker)
	if len(lines) != 1 || !lines[0].Bool("shadow") || !lines[0].Bool("wouldDeny") || lines[0].Str("decision") != "Deny" ||
		lines[0].Str("category") != "Frozen" || lines[0].Str("controller") != "shadow-writer" {
		t.Fatalf("want one shadow 'would deny' line, got %v", lines)
	}

	// The same write by a writer that is not in shadow mode is denied.
	body = bytes.Replace(body, []byte(marker), []byte(marker+"-2"), 1)
	eventually(t, 30*time.Second, "non-shadow writer denied", func() error {
		resp, data := post("enforced-writer", otherCfg.BearerToken)
		if resp.StatusCode != http.StatusForbidden {
			return fmt.Errorf("%d %s", resp.StatusCode, data)
		}
		return nil
	})
}

// An invalid config file is refused on reload and the last good one stays.
func TestInvalidConfigReloadKeepsLastGood(t *testing.T) {
	ctx := context.Background()
	setConfig(t, `apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
controllers:
- name: x
  match: {user: nobody}
  mode: log
`)
	before := env.Interceptor.Settings()
	mustf(t, os.WriteFile(env.ConfigPath, []byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: x\n  match: {user: nobody}\n  mode: sometimes\n"), 0o600), "write")
	time.Sleep(time.Second) // several reload periods; the hang guard of a negative check
	if env.Interceptor.Settings() != before {
		t.Fatal("an invalid config replaced the last good one")
	}
	data, err := os.ReadFile(env.LogPath)
	mustf(t, err, "log")
	if !strings.Contains(string(data), `controllers[0].mode: must be shadow, log or enforce, not \"sometimes\"`) {
		t.Fatal("the proxy did not log why the config was refused")
	}
	_ = ctx
}
