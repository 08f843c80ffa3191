package e2e

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

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/shadowreport"
)

// setConfig switches the proxy's config file for one test.
func setConfig(t *testing.T, content string) {
	t.Helper()
	mustf(t, env.SetConfig(context.Background(), content), "loading config")
	t.Cleanup(func() {
		if err := env.SetConfig(context.Background(), framework.BaseConfig); err != nil {
			t.Errorf("restoring the base config: %v", err)
		}
	})
}

func scaleRS(t *testing.T, cfgUser string, ns, name string, replicas int32) {
	t.Helper()
	cfg, err := env.UserThroughProxy(cfgUser, "system:masters")
	mustf(t, err, "user")
	_, err = clientFor(t, cfg).AppsV1().ReplicaSets(ns).UpdateScale(context.Background(), name,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}, metav1.UpdateOptions{})
	mustf(t, err, "%s scales %s to %d", cfgUser, name, replicas)
}

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
	admin := clientFor(t, env.Direct())
	shadowCfg, err := env.ServiceAccountThroughProxy(ctx, ns, "shadow-writer")
	mustf(t, err, "shadow writer")
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, editBinding(ns, "shadow-writer"), metav1.CreateOptions{})
	mustf(t, err, "binding")
	otherCfg, err := env.ServiceAccountThroughProxy(ctx, ns, "enforced-writer")
	mustf(t, err, "enforced writer")
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, editBinding(ns, "enforced-writer"), metav1.CreateOptions{})
	mustf(t, err, "binding")

	aliceCfg, err := env.UserThroughProxy("alice", "system:masters")
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
		req, _ := http.NewRequest(http.MethodPost, env.ProxyURL+"/api/v1/namespaces/"+ns+"/configmaps?fieldManager=shadow-writer", bytes.NewReader(body))
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

// kube-controller-manager through the proxy, namespace in enforce mode:
// the deployment controller is in shadow (its drift passes and is logged as
// would-deny), the replicaset controller is enforced (its drift is denied).
// Switching the deployment controller to enforce in the config file takes
// effect without a restart.
func TestPerControllerRollout(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "rollout", "enforce")
	const cfgTemplate = `apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
controllers:
- name: deployment-controller
  match:
    serviceAccount: kube-system/deployment-controller
  mode: %s
- name: replicaset-controller
  match:
    serviceAccount: kube-system/replicaset-controller
  mode: enforce
lifecycle:
- apiGroup: apps
  kind: ReplicaSet
  order: [ObservedGenerationCurrent]
`
	setConfig(t, fmt.Sprintf(cfgTemplate, "shadow"))
	aliceCfg, err := env.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "alice")
	alice := clientFor(t, aliceCfg)
	admin := clientFor(t, env.Direct())

	// Deployment controller in shadow: bob's scale is reverted despite
	// enforce, and the revert is logged as would-deny.
	_, rsName := waitStableDeployment(t, alice, ns, "web", false)
	scaleRS(t, "bob", ns, rsName, 2)
	eventually(t, 60*time.Second, "shadowed revert passes", func() error {
		rs, err := admin.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *rs.Spec.Replicas != 0 {
			return fmt.Errorf("replicas %d", *rs.Spec.Replicas)
		}
		return nil
	})
	// The decision line is written once the upstream has answered, so it
	// may land just after the revert is visible.
	eventually(t, 30*time.Second, "the shadowed drift is logged as would-deny", func() error {
		var seen []string
		for _, l := range decisionsFor(t, "replicasets", ns, rsName) {
			if l.Str("user") == deploymentController && l.Bool("shadow") && l.Bool("wouldDeny") && l.Str("controller") == "deployment-controller" {
				return nil
			}
			seen = append(seen, fmt.Sprintf("%s/%s/%s shadow=%v", l.Str("user"), l.Str("decision"), l.Str("category"), l.Bool("shadow")))
		}
		return fmt.Errorf("decisions seen: %v", seen)
	})
	// The operator's page: the shadow report names the controller and the
	// parent it would have been denied under.
	logFile, err := os.Open(env.LogPath)
	mustf(t, err, "log")
	rep, err := shadowreport.Read(logFile)
	logFile.Close()
	mustf(t, err, "shadow report")
	var found *shadowreport.Controller
	for _, c := range rep.Controllers {
		if c.Name == "deployment-controller" {
			found = c
		}
	}
	if found == nil || found.WouldDeny == 0 || found.Parents["apps/v1 Deployment "+ns+"/web"] == 0 {
		t.Fatalf("shadow report does not show the would-be denials under %s/web: %+v", ns, found)
	}

	// Replicaset controller enforced: a Pod deleted behind its back is not
	// recreated, because that create is drift.
	api := testDeployment("api", 1)
	_, err = alice.AppsV1().Deployments(ns).Create(ctx, api, metav1.CreateOptions{})
	mustf(t, err, "creating api")
	var pod corev1.Pod
	eventually(t, 90*time.Second, "api pod exists and its ReplicaSet is reconciled", func() error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=api"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		pod = pods.Items[0]
		rs, err := admin.AppsV1().ReplicaSets(ns).Get(ctx, metav1.GetControllerOf(&pod).Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rs.Status.ObservedGeneration != rs.Generation {
			return fmt.Errorf("rs observed %d of %d", rs.Status.ObservedGeneration, rs.Generation)
		}
		return nil
	})
	mustf(t, admin.CoreV1().Pods(ns).Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0)), "deleting the pod directly")
	replicasetController := "system:serviceaccount:kube-system:replicaset-controller"
	eventually(t, 60*time.Second, "the replicaset controller's re-create is denied", func() error {
		all, err := env.Decisions()
		if err != nil {
			return err
		}
		for _, l := range all {
			if l.Str("namespace") == ns && l.Str("resource") == "pods" && l.Str("user") == replicasetController &&
				l.Str("decision") == "Deny" && !l.Bool("shadow") && l.Str("controller") == "replicaset-controller" {
				return nil
			}
		}
		return fmt.Errorf("no denied pod create yet")
	})
	for i := 0; i < 5; i++ {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=api"})
		mustf(t, err, "list pods")
		if len(pods.Items) != 0 {
			t.Fatalf("the replicaset controller's drift went through: %d pods", len(pods.Items))
		}
		time.Sleep(time.Second)
	}

	// Switch the deployment controller to enforce: its next drift is denied.
	mustf(t, env.SetConfig(ctx, fmt.Sprintf(cfgTemplate, "enforce")), "switching to enforce")
	scaleRS(t, "bob", ns, rsName, 3)
	eventually(t, 60*time.Second, "the deployment controller's revert is now denied", func() error {
		for _, l := range decisionsFor(t, "replicasets", ns, rsName) {
			if l.Str("user") == deploymentController && !l.Bool("shadow") && l.Str("decision") == "Deny" {
				return nil
			}
		}
		return fmt.Errorf("no enforced denial yet")
	})
	rs, err := admin.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
	mustf(t, err, "get rs")
	if *rs.Spec.Replicas != 3 {
		t.Fatalf("after switching to enforce the revert went through: replicas %d", *rs.Spec.Replicas)
	}
}

// The resource rules decide what is intercepted: an excluded resource or
// namespace streams through without a decision line.
func TestResourceRulesDecideInterception(t *testing.T) {
	ctx := context.Background()
	nsIn := namespaceWithMode(t, "rules-in", "")
	nsOut := namespaceWithMode(t, "rules-out", "")
	setConfig(t, fmt.Sprintf(`apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
resourceRules:
  exclude:
  - apiGroups: [""]
    resources: [configmaps]
excludedNamespaces: [kube-system, %s]
`, nsOut))
	cfg, err := env.UserThroughProxy("rules-user", "system:masters")
	mustf(t, err, "user")
	c := clientFor(t, cfg)
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"k": "v"}}
	}
	_, err = c.CoreV1().ConfigMaps(nsIn).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "excluded-kind"}}, metav1.CreateOptions{})
	mustf(t, err, "configmap")
	_, err = c.CoreV1().Secrets(nsOut).Create(ctx, secret(nsOut, "excluded-ns"), metav1.CreateOptions{})
	mustf(t, err, "secret in excluded namespace")
	_, err = c.CoreV1().Secrets(nsIn).Create(ctx, secret(nsIn, "intercepted"), metav1.CreateOptions{})
	mustf(t, err, "secret")

	if n := len(decisionsFor(t, "secrets", nsIn, "intercepted")); n != 1 {
		t.Fatalf("targeted write: %d decision lines, want 1", n)
	}
	if n := len(decisionsFor(t, "configmaps", nsIn, "excluded-kind")); n != 0 {
		t.Fatalf("excluded resource: %d decision lines, want 0", n)
	}
	if n := len(decisionsFor(t, "secrets", nsOut, "excluded-ns")); n != 0 {
		t.Fatalf("excluded namespace: %d decision lines, want 0", n)
	}
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
	before := env.Proxy.Settings()
	mustf(t, os.WriteFile(env.ConfigPath, []byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: x\n  match: {user: nobody}\n  mode: sometimes\n"), 0o600), "write")
	time.Sleep(time.Second) // several reload periods; the hang guard of a negative check
	if env.Proxy.Settings() != before {
		t.Fatal("an invalid config replaced the last good one")
	}
	data, err := os.ReadFile(env.LogPath)
	mustf(t, err, "log")
	if !strings.Contains(string(data), `controllers[0].mode: must be shadow, log or enforce, not \"sometimes\"`) {
		t.Fatal("the proxy did not log why the config was refused")
	}
	_ = ctx
}

// Secrets and tokens never reach the logs.
func TestTokensNeverLogged(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "secrets", "")
	saCfg, err := env.ServiceAccountThroughProxy(ctx, ns, "writer")
	mustf(t, err, "sa")
	admin := clientFor(t, env.Direct())
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, editBinding(ns, "writer"), metav1.CreateOptions{})
	mustf(t, err, "binding")
	c := clientFor(t, saCfg)
	secretValue := "s3cr3t-value-" + ns
	eventually(t, 30*time.Second, "token caller writes a secret", func() error {
		_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"password": secretValue}}, metav1.CreateOptions{})
		return err
	})
	// A rejected token is not logged either.
	req, _ := http.NewRequest(http.MethodGet, env.ProxyURL+"/api/v1/namespaces/"+ns+"/secrets", nil)
	req.Header.Set("Authorization", "Bearer not-valid-"+ns)
	resp, err := rawClient(t, nil).Do(req)
	mustf(t, err, "bad token")
	resp.Body.Close()

	if len(decisionsFor(t, "secrets", ns, "s")) != 1 {
		t.Fatal("the secret write was not decided")
	}
	data, err := os.ReadFile(env.LogPath)
	mustf(t, err, "log")
	for _, secret := range []string{saCfg.BearerToken, "not-valid-" + ns, secretValue} {
		if strings.Contains(string(data), secret) {
			t.Fatalf("the proxy log contains a secret (%.12s...)", secret)
		}
	}
}
