package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/internal/kubectlplugin"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

// plugin runs `kubectl kausality` in-process with a kubeconfig for cfg.
type plugin struct {
	t          *testing.T
	kubeconfig string
}

func newPlugin(t *testing.T, cfg *rest.Config) *plugin {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	mustf(t, testenv.WriteKubeconfig(path, cfg), "kubeconfig")
	return &plugin{t: t, kubeconfig: path}
}

// run runs the plugin and fails the test when it fails.
func (p *plugin) run(args ...string) string {
	p.t.Helper()
	var out bytes.Buffer
	cmd := kubectlplugin.NewCommand(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", p.kubeconfig}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		p.t.Fatalf("kubectl kausality %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	p.t.Logf("kubectl kausality %s:\n%s", strings.Join(args, " "), out.String())
	return out.String()
}

// pluginPerson is a person through the proxy, and the plugin as that
// person.
func pluginPerson(t *testing.T, name string) *plugin {
	t.Helper()
	cfg, err := cluster.UserThroughProxy(name, "system:masters")
	mustf(t, err, "%s", name)
	return newPlugin(t, cfg)
}

// `why` explains a held revert (the parent, the controller, the mode and
// the approval that unblocks it); `approve --mode once` on the Deployment
// admits exactly that one revert, and the next edit is held again.
func TestPluginWhyAndApproveOnce(t *testing.T) {
	ns := namespaceWithMode(t, "plugin-appr", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	bob := intentPerson(t, "bob")
	carol := pluginPerson(t, "carol")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)

	mark := wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 3)
	intentHeld(t, alice, ns, rsName, mark, 3, 3*time.Second)

	child := "replicaset/" + rsName
	text := carol.run("-n", ns, "why", child)
	for _, want := range []string{
		"Parent:      apps/v1 Deployment " + ns + "/web",
		"Controller:  " + deploymentController,
		"Mode:        enforce (from namespace",
		"Deny (DriftUnapproved)",
		"kubectl kausality approve -n " + ns + " " + child + " --mode once",
		`[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"` + rsName + `"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("why does not say %q", want)
		}
	}
	var ex kubectlplugin.Explanation
	mustf(t, json.Unmarshal([]byte(carol.run("-n", ns, "why", child, "-o", "json")), &ex), "why -o json")
	held := ex.Verdict
	if ex.IfRemembered != nil {
		held = ex.IfRemembered
	}
	if held.Category != "DriftUnapproved" || held.Suggested == nil || held.Suggested.Name != rsName {
		t.Errorf("why -o json: verdict %+v, if remembered %+v", ex.Verdict, ex.IfRemembered)
	}
	if tr := carol.run("-n", ns, "trace", "replicaset.apps/"+rsName); !strings.Contains(tr, "ReplicaSet "+rsName+" (generation") || !strings.Contains(tr, "by bob") {
		t.Errorf("trace does not show bob's edit as the origin:\n%s", tr)
	}

	mark = wgMark(t)
	carol.run("-n", ns, "approve", child, "--mode", "once")
	intentWaitReplicas(t, alice, ns, rsName, 2, "the revert approved with kubectl kausality approve")
	eventually(t, 15*time.Second, "the approved revert's decision line, and the used approval gone", func() error {
		lines := intentLinesAfter(t, mark, "replicasets", ns, rsName)
		if countDecisions(lines, deploymentController, "Allow", "DriftApproved") == 0 {
			return fmt.Errorf("no Allow/DriftApproved line; lines: %s", intentDescribe(lines))
		}
		d, err := alice.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if v := d.Annotations[intentAnnApprovals]; v != "" && v != "[]" {
			return fmt.Errorf("%s is still %q", intentAnnApprovals, v)
		}
		return nil
	})
	if n := countDecisions(intentLinesAfter(t, mark, "replicasets", ns, rsName), deploymentController, "Allow", "DriftApproved"); n != 1 {
		t.Errorf("the once approval admitted %d writes, want 1", n)
	}

	mark = wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 3)
	intentHeld(t, alice, ns, rsName, mark, 3, 5*time.Second)
}

// A rejection written with `reject` holds the controller's revert although
// an always approval for the same child is there.
func TestPluginRejectBeatsApproval(t *testing.T) {
	ns := namespaceWithMode(t, "plugin-rej", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	bob := intentPerson(t, "bob")
	carol := pluginPerson(t, "carol")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)
	child := "rs/" + rsName

	carol.run("-n", ns, "approve", child, "--mode", "always")
	carol.run("-n", ns, "reject", child, "--reason", "needs SRE review")
	d, err := alice.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	if r := d.Annotations["kausality.io/rejections"]; !strings.Contains(r, `"reason":"needs SRE review"`) || !strings.Contains(r, `"user":"carol"`) {
		t.Fatalf("kausality.io/rejections = %q", r)
	}
	if a := d.Annotations[intentAnnApprovals]; !strings.Contains(a, `"mode":"always"`) {
		t.Fatalf("%s = %q", intentAnnApprovals, a)
	}

	mark := wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 3)
	eventually(t, 60*time.Second, "the controller's revert is rejected", func() error {
		lines := intentLinesAfter(t, mark, "replicasets", ns, rsName)
		if countDecisions(lines, deploymentController, "Deny", "DriftRejected") == 0 {
			return fmt.Errorf("no Deny/DriftRejected line; lines: %s", intentDescribe(lines))
		}
		return nil
	})
	intentExpectReplicas(t, alice, ns, rsName, 3, "while rejected")
	if n := countDecisions(intentLinesAfter(t, mark, "replicasets", ns, rsName), deploymentController, "Allow", "DriftApproved"); n != 0 {
		t.Fatalf("the approval admitted %d writes despite the rejection", n)
	}
	if text := carol.run("-n", ns, "why", child); !strings.Contains(text, "Deny (DriftRejected)") || !strings.Contains(text, "needs SRE review") {
		t.Errorf("why does not explain the rejection")
	}
}

// `freeze` holds the controller's scale-up of a frozen Deployment's
// ReplicaSet; `unfreeze` lets it through.
func TestPluginFreezeUnfreeze(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "plugin-freeze", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	carol := pluginPerson(t, "carol")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 1, false)

	carol.run("-n", ns, "freeze", "deployment/web", "--reason", "incident 42")
	d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	var fz map[string]string
	mustf(t, json.Unmarshal([]byte(d.Annotations[intentAnnFreeze]), &fz), "%s = %q", intentAnnFreeze, d.Annotations[intentAnnFreeze])
	if fz["user"] != "carol" || fz["reason"] != "incident 42" || fz["at"] == "" {
		t.Fatalf("%s = %v", intentAnnFreeze, fz)
	}

	mark := wgMark(t)
	_, err = alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{})
	mustf(t, err, "alice scales the frozen Deployment")
	eventually(t, 60*time.Second, "the controller's scale-up is held by the freeze", func() error {
		lines := intentLinesAfter(t, mark, "replicasets", ns, rsName)
		if countDecisions(lines, deploymentController, "Deny", "Frozen") == 0 {
			return fmt.Errorf("no Deny/Frozen line; lines: %s", intentDescribe(lines))
		}
		return nil
	})
	intentExpectReplicas(t, alice, ns, rsName, 1, "while frozen")
	if text := carol.run("-n", ns, "why", "replicaset/"+rsName); !strings.Contains(text, "Deny (Frozen)") || !strings.Contains(text, "kubectl kausality unfreeze") {
		t.Errorf("why does not explain the freeze")
	}

	carol.run("-n", ns, "unfreeze", "deployment/web")
	intentWaitReplicas(t, alice, ns, rsName, 2, "the scale-up after unfreeze")
	d, err = alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "get deployment")
	if v, ok := d.Annotations[intentAnnFreeze]; ok {
		t.Errorf("%s still set: %q", intentAnnFreeze, v)
	}
}
