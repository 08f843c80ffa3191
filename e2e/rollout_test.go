package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/cmd/kausality-proxy/shadowreport"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// setConfig switches the proxy's config file for one test.
func setConfig(t *testing.T, content string) {
	t.Helper()
	mustf(t, cluster.SetConfig(context.Background(), content), "loading config")
	t.Cleanup(func() {
		if err := cluster.SetConfig(context.Background(), framework.BaseConfig); err != nil {
			t.Errorf("restoring the base config: %v", err)
		}
	})
}

func scaleRS(t *testing.T, cfgUser string, ns, name string, replicas int32) {
	t.Helper()
	cfg, err := cluster.UserThroughProxy(cfgUser, "system:masters")
	mustf(t, err, "user")
	_, err = clientFor(t, cfg).AppsV1().ReplicaSets(ns).UpdateScale(context.Background(), name,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}, metav1.UpdateOptions{})
	mustf(t, err, "%s scales %s to %d", cfgUser, name, replicas)
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
ungatedChildKinds: []
`
	setConfig(t, fmt.Sprintf(cfgTemplate, "shadow"))
	aliceCfg, err := cluster.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "alice")
	alice := clientFor(t, aliceCfg)
	admin := clientFor(t, cluster.Direct())

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
	logData, err := cluster.ProxyLog()
	mustf(t, err, "log")
	rep, err := shadowreport.Read(bytes.NewReader(logData))
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

	// Replicaset controller enforced, with Pods gated (by default they are
	// traced, not gated): once its ReplicaSet has settled (its pod is
	// Ready), a Pod deleted behind its back is not recreated, because that
	// create is drift.
	readyPods(t, ns)
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
		if rs.Status.ObservedGeneration != rs.Generation || rs.Status.AvailableReplicas != 1 {
			return fmt.Errorf("rs observed %d of %d, %d available", rs.Status.ObservedGeneration, rs.Generation, rs.Status.AvailableReplicas)
		}
		return nil
	})
	mustf(t, admin.CoreV1().Pods(ns).Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0)), "deleting the pod directly")
	replicasetController := "system:serviceaccount:kube-system:replicaset-controller"
	eventually(t, 60*time.Second, "the replicaset controller's re-create is denied", func() error {
		all, err := cluster.Decisions()
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
	mustf(t, cluster.SetConfig(ctx, fmt.Sprintf(cfgTemplate, "enforce")), "switching to enforce")
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
	cfg, err := cluster.UserThroughProxy("rules-user", "system:masters")
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

// Secrets and tokens never reach the logs.
func TestTokensNeverLogged(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "secrets", "")
	saCfg, err := cluster.ServiceAccountThroughProxy(ctx, ns, "writer")
	mustf(t, err, "sa")
	admin := clientFor(t, cluster.Direct())
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, editBinding(ns, "writer"), metav1.CreateOptions{})
	mustf(t, err, "binding")
	c := clientFor(t, saCfg)
	secretValue := "s3cr3t-value-" + ns
	eventually(t, 30*time.Second, "token caller writes a secret", func() error {
		_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"password": secretValue}}, metav1.CreateOptions{})
		return err
	})
	// A rejected token is not logged either.
	req, _ := http.NewRequest(http.MethodGet, cluster.ProxyEndpoint().URL+"/api/v1/namespaces/"+ns+"/secrets", nil)
	req.Header.Set("Authorization", "Bearer not-valid-"+ns)
	resp, err := rawClient(t, nil).Do(req)
	mustf(t, err, "bad token")
	resp.Body.Close()

	if len(decisionsFor(t, "secrets", ns, "s")) != 1 {
		t.Fatal("the secret write was not decided")
	}
	data, err := cluster.ProxyLog()
	mustf(t, err, "log")
	for _, secret := range []string{saCfg.BearerToken, "not-valid-" + ns, secretValue} {
		if strings.Contains(string(data), secret) {
			t.Fatalf("the proxy log contains a secret (%.12s...)", secret)
		}
	}
}
