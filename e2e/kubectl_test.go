package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Everyday kubectl through the proxy, as a client-certificate user.
func TestKubectlThroughProxy(t *testing.T) {
	ns := newNamespace(t, "kubectl")
	cfg, err := cluster.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "user")
	k := newKubectl(t, cfg)

	k.run(`apiVersion: v1
kind: ConfigMap
metadata:
  name: one
data:
  a: "1"
`, "-n", ns, "create", "-f", "-")

	if out := k.run("", "-n", ns, "get", "configmap", "one", "-o", "jsonpath={.data.a}"); out != "1" {
		t.Fatalf("get: %q", out)
	}
	// Writes to cluster-scoped objects: kube-apiserver's request info names
	// a Namespace's own name as its namespace.
	k.run("", "annotate", "namespace", ns, "team=a")
	k.run("", "label", "namespace", ns, "tier=test")
	if out := k.run("", "get", "namespace", ns, "-o", "jsonpath={.metadata.annotations.team}/{.metadata.labels.tier}"); out != "a/test" {
		t.Fatalf("namespace patch: %q", out)
	}

	// watch: events must arrive while the watch is open, so the proxy must
	// flush the stream as it goes rather than buffer it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watch := k.cmd(ctx, "", "-n", ns, "get", "configmaps", "--watch-only", "--output-watch-events", "-o", "jsonpath={.type} {.object.metadata.name}{\"\\n\"}")
	stdout, err := watch.StdoutPipe()
	mustf(t, err, "watch pipe")
	mustf(t, watch.Start(), "starting watch")
	defer func() { cancel(); _ = watch.Wait() }()
	lines := make(chan string, 10)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	// The watch is established once kubectl has connected; creating objects
	// until one shows up avoids racing its start.
	got := ""
	for i := 0; got == "" && i < 30; i++ {
		name := "watched-" + string(rune('a'+i%26))
		k.run("", "-n", ns, "create", "configmap", name, "--from-literal=x=y")
		select {
		case l := <-lines:
			got = l
		case <-time.After(2 * time.Second):
		}
	}
	if !strings.HasPrefix(got, "ADDED watched-") {
		t.Fatalf("watch through the proxy delivered %q, want an ADDED event", got)
	}

	list := k.run("", "-n", ns, "get", "configmaps", "-o", "json")
	var cms corev1.ConfigMapList
	mustf(t, json.Unmarshal([]byte(list), &cms), "list output")
	if len(cms.Items) < 2 {
		t.Fatalf("list returned %d items", len(cms.Items))
	}

	// server-side apply, then every patch type.
	k.run(`apiVersion: v1
kind: ConfigMap
metadata:
  name: applied
data:
  k: v1
`, "-n", ns, "apply", "--server-side", "--field-manager=e2e", "-f", "-")
	k.run("", "-n", ns, "patch", "configmap", "applied", "--type=merge", "-p", `{"data":{"merge":"yes"}}`)
	k.run("", "-n", ns, "patch", "configmap", "applied", "--type=strategic", "-p", `{"data":{"strategic":"yes"}}`)
	k.run("", "-n", ns, "patch", "configmap", "applied", "--type=json", "-p", `[{"op":"add","path":"/data/json","value":"yes"}]`)
	out := k.run("", "-n", ns, "get", "configmap", "applied", "-o", "json", "--show-managed-fields")
	var applied corev1.ConfigMap
	mustf(t, json.Unmarshal([]byte(out), &applied), "applied output")
	for key, want := range map[string]string{"k": "v1", "merge": "yes", "strategic": "yes", "json": "yes"} {
		if applied.Data[key] != want {
			t.Errorf("after patches data[%s] = %q, want %q (data %v)", key, applied.Data[key], want, applied.Data)
		}
	}
	managers := map[string]bool{}
	for _, mf := range applied.ManagedFields {
		managers[mf.Manager] = true
	}
	if !managers["e2e"] {
		t.Errorf("server-side apply field manager e2e missing from %v", managers)
	}

	k.run("", "-n", ns, "delete", "configmap", "applied")
	if _, err := k.try("", "-n", ns, "get", "configmap", "applied"); err == nil {
		t.Fatal("configmap still there after delete")
	}
}

// exec is an upgrade request. For a pod that was never scheduled (there is
// no scheduler locally, and on kind none serves its schedulerName),
// kube-apiserver refuses it itself; the proxy must deliver that refusal
// unchanged, not an error of its own.
func TestExecUpgradeReachesUpstream(t *testing.T) {
	ns := newNamespace(t, "exec")
	admin := clientFor(t, cluster.Direct())
	_, err := admin.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nowhere"},
		Spec: corev1.PodSpec{
			SchedulerName: "kausality-e2e-no-such-scheduler",
			Containers:    []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}},
		},
	}, metav1.CreateOptions{})
	mustf(t, err, "creating pod")

	cfg, err := cluster.UserThroughProxy("exec-user", "system:masters")
	mustf(t, err, "user")

	// kubectl exec speaks WebSocket first and falls back to SPDY.
	out, err := newKubectl(t, cfg).try("", "-n", ns, "exec", "nowhere", "--", "true")
	if err == nil {
		t.Fatalf("exec succeeded without a kubelet: %s", out)
	}
	if !strings.Contains(out, "does not have a host assigned") {
		t.Fatalf("kubectl exec did not get kube-apiserver's own answer through the proxy:\n%s", out)
	}

	// The same as a raw SPDY upgrade: the apiserver's Status comes back as is.
	for _, upgrade := range []string{"SPDY/3.1", "websocket"} {
		t.Run(upgrade, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, cluster.ProxyEndpoint().URL+"/api/v1/namespaces/"+ns+"/pods/nowhere/exec?command=true&stdout=true", nil)
			mustf(t, err, "request")
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", upgrade)
			req.Header.Set("X-Stream-Protocol-Version", "v4.channel.k8s.io")
			if upgrade == "websocket" {
				req.Header.Set("Sec-WebSocket-Version", "13")
				req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
				req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
			}
			resp, err := rawClient(t, certOf(t, cfg)).Do(req)
			mustf(t, err, "upgrade request")
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			var status metav1.Status
			if err := json.Unmarshal(body, &status); err != nil {
				t.Fatalf("response %d is not a Status: %v\n%s", resp.StatusCode, err, body)
			}
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(status.Message, "does not have a host assigned") {
				t.Fatalf("got %d %q, want kube-apiserver's 400 about the missing host", resp.StatusCode, status.Message)
			}
		})
	}
}
