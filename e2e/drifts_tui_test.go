//go:build !kind

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

var (
	pluginBinaryOnce sync.Once
	pluginBinaryPath string
	pluginBinaryErr  error
)

// pluginBinary builds kubectl-kausality once: the terminal UI is tested as
// the program a person runs, in a real terminal.
func pluginBinary(t *testing.T) string {
	t.Helper()
	pluginBinaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kubectl-kausality-")
		if err != nil {
			pluginBinaryErr = err
			return
		}
		pluginBinaryPath = filepath.Join(dir, "kubectl-kausality")
		out, err := exec.Command("go", "build", "-o", pluginBinaryPath, "../cmd/kubectl-kausality").CombinedOutput()
		if err != nil {
			pluginBinaryErr = fmt.Errorf("go build ./cmd/kubectl-kausality: %v\n%s", err, out)
		}
	})
	mustf(t, pluginBinaryErr, "building the plugin")
	return pluginBinaryPath
}

// terminal is a tmux session of its own (its own server socket) running a
// shell, read with capture-pane as a person reads the screen.
type terminal struct {
	t      *testing.T
	socket string
}

func newTerminal(t *testing.T) *terminal {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is not installed: the terminal UI is tested in a real terminal (make test installs it: apt-get install -y tmux): %v", err)
	}
	term := &terminal{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock")}
	term.tmux("new-session", "-d", "-x", "160", "-y", "60", "-s", "drifts", "env", "-i", "PATH="+os.Getenv("PATH"), "HOME="+t.TempDir(), "TERM=xterm-256color", "/bin/sh")
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", term.socket, "kill-server").Run() })
	return term
}

func (term *terminal) tmux(args ...string) string {
	term.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", term.socket}, args...)...).CombinedOutput()
	mustf(term.t, err, "tmux %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// typeLine types a shell command and runs it.
func (term *terminal) typeLine(s string) {
	term.t.Helper()
	term.tmux("send-keys", "-t", "drifts", "-l", s)
	term.tmux("send-keys", "-t", "drifts", "Enter")
}

// keys sends keys the way a person presses them (tmux key names).
func (term *terminal) keys(keys ...string) {
	term.t.Helper()
	term.tmux(append([]string{"send-keys", "-t", "drifts"}, keys...)...)
}

func (term *terminal) screen() string {
	term.t.Helper()
	return term.tmux("capture-pane", "-p", "-t", "drifts")
}

// waitScreen waits until the screen satisfies ok, and returns it.
func (term *terminal) waitScreen(timeout time.Duration, what string, ok func(string) bool) string {
	term.t.Helper()
	var s string
	eventually(term.t, timeout, what, func() error {
		s = term.screen()
		if !ok(s) {
			return fmt.Errorf("the screen is:\n%s", s)
		}
		return nil
	})
	return s
}

func contains(want ...string) func(string) bool {
	return func(s string) bool {
		for _, w := range want {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	}
}

// startDrifts starts `kubectl kausality drifts` for cfg in the terminal.
func (term *terminal) startDrifts(cfg *rest.Config, args ...string) {
	term.t.Helper()
	kc := filepath.Join(term.t.TempDir(), "kubeconfig")
	mustf(term.t, testenv.WriteKubeconfig(kc, cfg), "kubeconfig")
	term.typeLine("clear; echo before-drifts")
	term.waitScreen(10*time.Second, "the shell", contains("before-drifts"))
	term.typeLine(fmt.Sprintf("%s --kubeconfig %s drifts --drift-namespace %s %s; echo drifts-exited=$?",
		pluginBinary(term.t), kc, framework.DriftNamespace, strings.Join(args, " ")))
	term.waitScreen(30*time.Second, "the drifts UI", contains("kubectl kausality drifts"))
}

// quit presses key (q or C-c) and checks the terminal is as it was: the shell's screen
// back, not the UI's, and the plugin exited 0.
func (term *terminal) quit(key string) {
	term.t.Helper()
	term.keys(key)
	s := term.waitScreen(15*time.Second, "the plugin exits", contains("drifts-exited=0"))
	if strings.Contains(s, "kubectl kausality drifts —") || !strings.Contains(s, "before-drifts") {
		term.t.Errorf("after q the terminal does not show the shell as it was:\n%s", s)
	}
	if alt := strings.TrimSpace(term.tmux("display-message", "-p", "-t", "drifts", "#{alternate_on}")); alt != "0" {
		term.t.Errorf("after q the terminal is still on the alternate screen (alternate_on=%s)", alt)
	}
}

// A person on call sees the held revert in `kubectl kausality drifts`,
// approves it once by key, and the revert goes through and the row leaves;
// a second drift rejected by key stays held. A person without the right to
// patch the parent sees the 403 as one line, and nothing is written.
func TestDriftsTUI(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "drifts-tui", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	bob := intentPerson(t, "bob")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)
	carolCfg, err := cluster.UserThroughProxy("carol", "system:masters")
	mustf(t, err, "carol")

	term := newTerminal(t)
	term.startDrifts(carolCfg, "-n", ns)
	term.waitScreen(30*time.Second, "no open drifts in the new namespace", contains("No open drifts."))

	mark := wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 3)
	intentHeld(t, alice, ns, rsName, mark, 3, 0)
	s := term.waitScreen(30*time.Second, "the held revert in the list",
		contains("held", "enforce", "Deployment web", "ReplicaSet "+rsName, "kube-system:deployment-co", "spec.replicas: 3 → 2"))
	t.Logf("the list:\n%s", s)

	term.keys("Enter")
	s = term.waitScreen(30*time.Second, "the detail with the approval JSON and why",
		contains("Drift ", "- spec.replicas: 3", "+ spec.replicas: 2", `"kind":"ReplicaSet","name":"`+rsName+`"`, "Trace:", "by bob",
			"Policies:", "Deny (DriftUnapproved)"))
	t.Logf("the detail:\n%s", s)

	mark = wgMark(t)
	term.keys("a")
	term.waitScreen(10*time.Second, "the confirmation", contains("approve once for ReplicaSet "+ns+"/"+rsName+" on Deployment "+ns+"/web? [y/N]"))
	term.keys("y")
	intentWaitReplicas(t, alice, ns, rsName, 2, "the revert approved once from the UI")
	term.waitScreen(60*time.Second, "the approved drift leaves the list", contains("No open drifts."))
	eventually(t, 15*time.Second, "the approved revert's decision line", func() error {
		if countDecisions(intentLinesAfter(t, mark, "replicasets", ns, rsName), deploymentController, "Allow", "DriftApproved") == 0 {
			return fmt.Errorf("no Allow/DriftApproved line")
		}
		return nil
	})
	if n := countDecisions(intentLinesAfter(t, mark, "replicasets", ns, rsName), deploymentController, "Allow", "DriftApproved"); n != 1 {
		t.Errorf("the once approval admitted %d writes, want 1", n)
	}
	d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	if v := d.Annotations[intentAnnApprovals]; v != "" && v != "[]" {
		t.Errorf("%s is still %q after the once approval was used", intentAnnApprovals, v)
	}

	mark = wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 4)
	intentHeld(t, alice, ns, rsName, mark, 4, 0)
	term.waitScreen(30*time.Second, "the second drift in the list", contains("held", "spec.replicas: 4 → 2"))
	term.keys("r")
	term.waitScreen(10*time.Second, "the reject prompt", contains("reject for ReplicaSet "+ns+"/"+rsName, "reason"))
	term.keys("-l", "needs SRE review")
	term.keys("Enter")
	term.waitScreen(30*time.Second, "the rejection written", contains("Deployment "+ns+"/web updated"))
	d, err = alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	if r := d.Annotations["kausality.io/rejections"]; !strings.Contains(r, `"reason":"needs SRE review"`) || !strings.Contains(r, `"user":"carol"`) {
		t.Fatalf("kausality.io/rejections = %q", r)
	}
	mark = wgMark(t)
	eventually(t, 60*time.Second, "the controller's revert is rejected", func() error {
		if countDecisions(intentLinesAfter(t, mark, "replicasets", ns, rsName), deploymentController, "Deny", "DriftRejected") == 0 {
			return fmt.Errorf("no Deny/DriftRejected line yet")
		}
		return nil
	})
	intentExpectReplicas(t, alice, ns, rsName, 4, "after the rejection from the UI")
	term.quit("q")

	// dave may read the drifts and the objects, not patch the parent.
	admin := directClient(t)
	for _, bindNS := range []string{ns, framework.DriftNamespace} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "dave-view", Namespace: bindNS},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
			Subjects:   []rbacv1.Subject{{Kind: "User", Name: "dave"}},
		}
		_, err := admin.RbacV1().RoleBindings(bindNS).Create(ctx, rb, metav1.CreateOptions{})
		mustf(t, err, "binding dave to view in %s", bindNS)
		t.Cleanup(func() {
			_ = admin.RbacV1().RoleBindings(bindNS).Delete(context.Background(), "dave-view", metav1.DeleteOptions{})
		})
		waitAllowed(t, "dave", "list", "configmaps", bindNS)
	}
	daveCfg, err := cluster.UserThroughProxy("dave")
	mustf(t, err, "dave")
	before, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	term.startDrifts(daveCfg, "-n", ns)
	term.waitScreen(30*time.Second, "the held drift, for dave", contains("held", "spec.replicas: 4 → 2"))
	term.keys("a")
	term.waitScreen(10*time.Second, "the confirmation", contains("[y/N]"))
	term.keys("y")
	s = term.waitScreen(30*time.Second, "the 403 as one line", contains("error: ", "forbidden", `User "dave" cannot patch`))
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "forbidden") && !strings.Contains(l, "error: ") {
			t.Errorf("the 403 is not one line:\n%s", s)
		}
	}
	after, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	if after.ResourceVersion != before.ResourceVersion || after.Annotations[intentAnnApprovals] != before.Annotations[intentAnnApprovals] {
		t.Errorf("dave's refused approval changed the Deployment: %s %q → %s %q", before.ResourceVersion,
			before.Annotations[intentAnnApprovals], after.ResourceVersion, after.Annotations[intentAnnApprovals])
	}
	term.quit("C-c")
}

// Without a terminal, drifts prints the list once: for scripts and CI.
func TestDriftsWithoutTerminal(t *testing.T) {
	ns := namespaceWithMode(t, "drifts-once", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	bob := intentPerson(t, "bob")
	carol := pluginPerson(t, "carol")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)
	mark := wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 3)
	intentHeld(t, alice, ns, rsName, mark, 3, 0)
	eventually(t, 30*time.Second, "the held drift in the printed list", func() error {
		var out bytes.Buffer
		out.WriteString(carol.run("-n", ns, "drifts", "--drift-namespace", framework.DriftNamespace))
		if !strings.Contains(out.String(), "held") || !strings.Contains(out.String(), "ReplicaSet "+rsName) {
			return fmt.Errorf("drifts printed:\n%s", out.String())
		}
		return nil
	})
	js := carol.run("-n", ns, "drifts", "--drift-namespace", framework.DriftNamespace, "-o", "json")
	if !strings.Contains(js, `"held": true`) || !strings.Contains(js, `"mode": "enforce"`) {
		t.Errorf("drifts -o json:\n%s", js)
	}
}
