//go:build !kind

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/report/drifts"
	slackesc "github.com/kausality-io/kausality-proxy/report/escalation"
)

// slackRig is a drift rig whose replicas escalate to a fake Slack, with
// the message of the Widget's drift posted.
type slackRig struct {
	*driftRig
	slack *fakeSlack
	msg   slackCall
}

func newSlackRig(t *testing.T, prefix string, replicas int) *slackRig {
	t.Helper()
	slack := newFakeSlack(t)
	rig := &slackRig{slack: slack, driftRig: newDriftRig(t, prefix, replicas, func(o *framework.ReplicaOptions) { slack.configure(t, &o.Drifts) })}
	rig.drift(0, "drifted")
	eventually(t, 60*time.Second, "the escalation message", func() error {
		for _, m := range slack.posted() {
			if strings.Contains(m.blocks, rig.f.widget) {
				rig.msg = m
				return nil
			}
		}
		return fmt.Errorf("%d messages, none about Widget %s", len(slack.posted()), rig.f.widget)
	})
	messageRecorded(t, rig.recordNS, rig.msg.ts)
	return rig
}

// messageRecorded waits until a drift record in namespace holds the
// message posted at ts: the ledger writes it down after Slack answered the
// post, and a click that comes earlier finds no message to match.
func messageRecorded(t *testing.T, namespace, ts string) {
	t.Helper()
	eventually(t, 30*time.Second, "the drift record holds message "+ts, func() error {
		list, err := directClient(t).CoreV1().ConfigMaps(namespace).List(context.Background(),
			metav1.ListOptions{LabelSelector: drifts.ComponentLabel + "=drift-record"})
		if err != nil {
			return err
		}
		for _, cm := range list.Items {
			var st drifts.State
			if json.Unmarshal([]byte(cm.Data["state"]), &st) == nil && st.Slack != nil && st.Slack.Timestamp == ts {
				return nil
			}
		}
		return fmt.Errorf("%d records, none with the message", len(list.Items))
	})
}

// slackClickPayload is what Slack posts for a click; the tests change its
// parts as an attacker holding a valid signature for it could.
type slackClickPayload struct {
	action, value, channel, ts, blocks string
}

func (rig *slackRig) payload(action string) slackClickPayload {
	return slackClickPayload{action: action, value: buttons(rig.t, rig.msg.blocks)[action], channel: fakeSlackChannel,
		ts: rig.msg.ts, blocks: rig.msg.blocks}
}

// signed is the click as Slack signs it now.
func (p slackClickPayload) signed(t *testing.T) click {
	t.Helper()
	blocks := json.RawMessage(p.blocks)
	if p.blocks == "" {
		blocks = json.RawMessage("[]")
	}
	payload, err := json.Marshal(map[string]any{
		"type":      "block_actions",
		"user":      map[string]any{"id": "U0MALLORY", "username": "mallory"},
		"container": map[string]any{"type": "message", "channel_id": p.channel, "message_ts": p.ts},
		"channel":   map[string]any{"id": p.channel},
		"message":   map[string]any{"ts": p.ts, "blocks": blocks},
		"actions": []any{map[string]any{"type": "button", "action_id": p.action, "block_id": "kausality_actions", "value": p.value,
			"action_ts": strconv.FormatInt(time.Now().UnixNano(), 10)}},
	})
	mustf(t, err, "click payload")
	c := click{body: "payload=" + url.QueryEscape(string(payload)), timestamp: strconv.FormatInt(time.Now().Unix(), 10)}
	c.signature = sign(fakeSlackSecret, c.timestamp, c.body)
	return c
}

// ephemeralTold waits for the clicker to be told, in an ephemeral message,
// text.
func (s *fakeSlack) ephemeralTold(t *testing.T, text string) {
	t.Helper()
	eventually(t, 20*time.Second, "the clicker is told "+text, func() error {
		for _, c := range s.callsOf("chat.postEphemeral") {
			if strings.Contains(c.text, text) {
				return nil
			}
		}
		return fmt.Errorf("ephemeral messages %+v", s.callsOf("chat.postEphemeral"))
	})
}

// expectNoWriteOf proves with the audit log that nobody patched or updated
// the object since start. A control request, audited after the refused
// click was answered, makes "nothing" mean something.
func expectNoWriteOf(t *testing.T, start time.Time, resource, namespace, name string) {
	t.Helper()
	control := "slack-control-" + rand.String(6)
	_, _ = directClient(t).CoreV1().ConfigMaps("default").Get(context.Background(), control, metav1.GetOptions{})
	waitAudited(t, control)
	writes := auditedSince(t, start, func(e auditv1.Event) bool {
		return e.Stage == auditv1.StageResponseComplete && (e.Verb == "patch" || e.Verb == "update") && e.ObjectRef != nil &&
			e.ObjectRef.Resource == resource && e.ObjectRef.Namespace == namespace && e.ObjectRef.Name == name &&
			e.ObjectRef.Subresource == ""
	})
	if len(writes) > 0 {
		t.Fatalf("%s %s/%s was written after a refused click:%s", resource, namespace, name, describeEvents(writes))
	}
}

// A click names a drift id no open record has, with the objects of the
// Widget in its value as buttons used to carry them: refused, the Widget
// untouched.
func TestAttackSlackClickWithMadeUpDriftID(t *testing.T) {
	rig := newSlackRig(t, "slack-madeup", 1)
	det := rig.detected(30 * time.Second)
	p := rig.payload(slackesc.ActionApproveOnce)
	p.value = fmt.Sprintf(`{"d":"00000000deadbeef","p":{"v":%q,"k":"Widget","n":%q},"c":{"v":%q,"k":"Gadget","ns":%q,"n":"g"},"g":%d}`,
		wgAPIVersion, rig.f.widget, wgAPIVersion, rig.f.ns, det.Spec.Parent.Generation)
	rig.refusedWithoutWrite(t, p, "a click for a made-up drift", http.StatusNotFound, "drift 00000000deadbeef is not open")
}

// refusedWithoutWrite sends the click p to the first replica and checks
// that it is refused with code, the clicker is told why, and the Widget is
// neither written nor approved.
func (rig *slackRig) refusedWithoutWrite(t *testing.T, p slackClickPayload, what string, code int, told string) {
	t.Helper()
	start := time.Now()
	if got := p.signed(t).send(t, rig.replicas[0].SlackURL); got != code {
		t.Errorf("%s got %d, want %d", what, got, code)
	}
	rig.slack.ephemeralTold(t, told)
	expectNoWriteOf(t, start, "widgets", "", rig.f.widget)
	if got := rig.f.getWidget().GetAnnotations()[wgAnnApprovals]; got != "" {
		t.Fatalf("approvals %s", got)
	}
}

// A drift record forged into the proxy's namespace names Namespace
// kube-system as the parent, and a click on it asks for a rejection: the
// proxy never writes where it never gates.
func TestAttackSlackClickRejectsKubeSystem(t *testing.T) {
	rig := newSlackRig(t, "slack-kubesys", 1)
	const id, ts = "00000000c0ffee00", "1700000000.999999"
	report := v1alpha1.DriftReport{APIVersion: v1alpha1.DriftReportAPIVersion, Kind: v1alpha1.DriftReportKind, Spec: v1alpha1.DriftReportSpec{
		ID: id, Phase: v1alpha1.PhaseDetected,
		Parent: v1alpha1.ParentRef{APIVersion: "v1", Kind: "Namespace", Name: "kube-system"},
		Child:  v1alpha1.ChildRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "kube-system", Name: "kube-root-ca.crt"},
	}}
	state := drifts.State{DetectedAt: metav1.Now(), Slack: &slackesc.MessageRef{Channel: fakeSlackChannel, Timestamp: ts}}
	rb, err := json.Marshal(report)
	mustf(t, err, "report")
	sb, err := json.Marshal(state)
	mustf(t, err, "state")
	_, err = directClient(t).CoreV1().ConfigMaps(rig.recordNS).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: drifts.RecordName(id), Labels: map[string]string{
			drifts.ManagedByLabel: "kausality-proxy", drifts.ComponentLabel: "drift-record", drifts.PairLabel: drifts.PairHash(report)}},
		Data: map[string]string{"report": string(rb), "state": string(sb)},
	}, metav1.CreateOptions{})
	mustf(t, err, "forging a drift record")

	p := rig.payload(slackesc.ActionReject)
	p.ts, p.blocks = ts, ""
	p.value = `{"d":"` + id + `","p":{"v":"v1","k":"Namespace","n":"kube-system"},"c":{"v":"v1","k":"ConfigMap","ns":"kube-system","n":"kube-root-ca.crt"},"g":0}`
	start := time.Now()
	if code := p.signed(t).send(t, rig.replicas[0].SlackURL); code != http.StatusForbidden {
		t.Errorf("a click on a kube-system drift got %d, want 403", code)
	}
	rig.slack.ephemeralTold(t, "never gates")
	expectNoWriteOf(t, start, "namespaces", "", "kube-system")
	ns, err := directClient(t).CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	mustf(t, err, "kube-system")
	if v, ok := ns.Annotations[annotations.Rejections]; ok {
		t.Fatalf("kube-system carries a rejection: %s", v)
	}
}

// The drift's own message, clicked from another channel (a shared or
// forwarded message): refused.
func TestAttackSlackClickFromAnotherChannel(t *testing.T) {
	rig := newSlackRig(t, "slack-channel", 1)
	p := rig.payload(slackesc.ActionApproveOnce)
	p.channel = "C0ELSEWHERE"
	rig.refusedWithoutWrite(t, p, "a click from another channel", http.StatusForbidden, "only in the channel it was posted to")
}

// A click applied by one replica, replayed to another replica and to one
// started after the first stopped: both refuse it from the drift record.
func TestAttackSlackClickReplayedOnAnotherReplica(t *testing.T) {
	rig := newSlackRig(t, "slack-replay", 2)
	c := rig.payload(slackesc.ActionSnooze).signed(t)
	if code := c.send(t, rig.replicas[0].SlackURL); code != http.StatusOK {
		t.Fatalf("the click got %d", code)
	}
	eventually(t, 20*time.Second, "the snooze is written", func() error {
		if rig.f.getWidget().GetAnnotations()[annotations.SnoozeUntil] == "" {
			return fmt.Errorf("no snooze yet")
		}
		return nil
	})
	// The message update follows the write; past it, the click is done.
	eventually(t, 20*time.Second, "the message says snoozed", func() error {
		for _, u := range rig.slack.callsOf("chat.update") {
			if u.ts == rig.msg.ts && strings.Contains(u.text, "snoozed") {
				return nil
			}
		}
		return fmt.Errorf("updates %+v", rig.slack.callsOf("chat.update"))
	})
	start := time.Now()
	if code := c.send(t, rig.replicas[1].SlackURL); code != http.StatusUnauthorized {
		t.Errorf("the replay on the second replica got %d, want 401", code)
	}
	rig.replicas[0].Stop()
	restarted := rig.start()
	if code := c.send(t, restarted.SlackURL); code != http.StatusUnauthorized {
		t.Errorf("the replay on a replica started afterwards got %d, want 401", code)
	}
	expectNoWriteOf(t, start, "widgets", "", rig.f.widget)
}

// A Deployment counts an annotation change as a new generation. The
// Snooze button of a drift's message bumps it, and the Approve button of
// the same message must still approve: the spec is the one the drift was
// detected under.
func TestAttackSlackApproveAfterSnoozeClick(t *testing.T) {
	ctx := context.Background()
	slack := newFakeSlack(t)
	recordNS := newNamespace(t, "slack-records")
	opts := framework.ReplicaOptions{Drifts: framework.DriftTimings(recordNS)}
	slack.configure(t, &opts.Drifts)
	replica, err := env.StartReplica(ctx, opts)
	mustf(t, err, "starting a proxy replica with Slack")
	t.Cleanup(replica.Stop)

	ns := namespaceWithMode(t, "slack-snooze", "enforce")
	readyPods(t, ns)
	alice := intentPerson(t, "alice")
	bob := intentPerson(t, "bob")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)
	mark := wgMark(t)
	intentScaleRS(t, bob, ns, rsName, 3)
	intentHeld(t, alice, ns, rsName, mark, 3, 3*time.Second)

	// The deployment controller's revert, through the replica that
	// escalates: denied, and posted.
	saCfg, err := cluster.ServiceAccountThroughProxy(ctx, "kube-system", "deployment-controller")
	mustf(t, err, "the deployment controller's service account")
	ctrl := clientFor(t, replica.Through(saCfg))
	if err := intentSetReplicas(ctrl, ns, rsName, 2, intentManager); err == nil {
		t.Fatal("the revert through the Slack replica was allowed")
	}
	var msg slackCall
	eventually(t, 60*time.Second, "the escalation message", func() error {
		for _, m := range slack.posted() {
			if strings.Contains(m.blocks, rsName) {
				msg = m
				return nil
			}
		}
		return fmt.Errorf("%d messages, none about ReplicaSet %s", len(slack.posted()), rsName)
	})
	messageRecorded(t, recordNS, msg.ts)
	values := buttons(t, msg.blocks)
	before, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "deployment")

	snooze := newClick(t, slackesc.ActionSnooze, values[slackesc.ActionSnooze], msg.ts, msg.blocks)
	if code := snooze.send(t, replica.SlackURL); code != http.StatusOK {
		t.Fatalf("the snooze click got %d", code)
	}
	var generation int64
	eventually(t, 20*time.Second, "the snooze is written and bumps the generation", func() error {
		d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Annotations[annotations.SnoozeUntil] == "" || d.Generation == before.Generation {
			return fmt.Errorf("generation %d (was %d), snooze %q", d.Generation, before.Generation, d.Annotations[annotations.SnoozeUntil])
		}
		generation = d.Generation
		return nil
	})

	approve := newClick(t, slackesc.ActionApproveOnce, values[slackesc.ActionApproveOnce], msg.ts, msg.blocks)
	if code := approve.send(t, replica.SlackURL); code != http.StatusOK {
		t.Fatalf("the approve click got %d", code)
	}
	// The message says what the click did; the once approval itself may
	// be used up by the controller's next retry before it can be seen.
	eventually(t, 20*time.Second, "the click approves", func() error {
		var updates []string
		for _, u := range slack.callsOf("chat.update") {
			if u.ts == msg.ts && strings.Contains(u.text, "approved the next write") {
				return nil
			}
			updates = append(updates, u.text)
		}
		return fmt.Errorf("message updates %q (the Deployment is at generation %d)", updates, generation)
	})
	// The approved revert goes through.
	intentWaitReplicas(t, alice, ns, rsName, 2, "the approved revert")
}

// A controller denied in a loop, each create a new drift, used to post a
// message per drift. Past its bucket the messages are suppressed, and one
// summary counts them: every drift is either posted or counted.
func TestAttackSlackMessageFlood(t *testing.T) {
	slack := newFakeSlack(t)
	rig := newDriftRig(t, "slack-flood", 1, func(o *framework.ReplicaOptions) {
		slack.configure(t, &o.Drifts)
		o.Drifts.SlackLimits = slackesc.MessageLimits{PerController: slackesc.Rate{Every: time.Hour, Burst: 3}, SummaryAfter: 3 * time.Second}
	})
	const creates = 20
	for i := range creates {
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wgAPIVersion, "kind": "Gadget",
			"metadata": map[string]any{"name": fmt.Sprintf("flood-%02d", i), "namespace": rig.f.ns},
			"spec":     map[string]any{"value": "v1"},
		}}
		g.SetOwnerReferences([]metav1.OwnerReference{rig.f.ownerRef()})
		_, err := rig.f.gadgets(rig.ctrls[0]).Create(context.Background(), g, metav1.CreateOptions{FieldManager: wgManager})
		if err == nil {
			t.Fatalf("create %d was allowed", i)
		}
	}
	summarized := regexp.MustCompile("(\\d+) more drifts from controller `" + regexp.QuoteMeta(wgControllerUser) + "` suppressed")
	var posted, suppressed int
	eventually(t, 60*time.Second, "every drift posted or summarized", func() error {
		posted, suppressed = 0, 0
		for _, m := range slack.posted() {
			if strings.Contains(m.blocks, "flood-") {
				posted++
			}
			for _, match := range summarized.FindAllStringSubmatch(m.text, -1) {
				n, _ := strconv.Atoi(match[1])
				suppressed += n
			}
		}
		if posted+suppressed != creates {
			return fmt.Errorf("%d posted and %d summarized of %d drifts", posted, suppressed, creates)
		}
		return nil
	})
	if posted != 3 {
		t.Errorf("%d drift messages, want the controller's burst of 3", posted)
	}
}
