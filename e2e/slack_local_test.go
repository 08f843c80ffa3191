//go:build !kind

package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept"
	slackesc "github.com/kausality-io/kausality-proxy/report/escalation"
)

const (
	fakeSlackChannel = "C0DRIFT"
	fakeSlackSecret  = "e2e-signing-secret"
)

// slackCall is one Web API call the proxy made.
type slackCall struct {
	method string
	ts     string
	text   string
	blocks string
}

// fakeSlack plays Slack's Web API (chat.postMessage, chat.update) on
// loopback and records the calls.
type fakeSlack struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []slackCall
	seq   int
}

func newFakeSlack(t *testing.T) *fakeSlack {
	t.Helper()
	s := &fakeSlack{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if got := r.Header.Get("Authorization"); got != "Bearer xoxb-e2e" && r.Form.Get("token") != "xoxb-e2e" {
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "invalid_auth"})
			return
		}
		method := strings.TrimPrefix(r.URL.Path, "/")
		s.mu.Lock()
		ts := r.Form.Get("ts")
		if method == "chat.postMessage" {
			s.seq++
			ts = fmt.Sprintf("1700000000.%06d", s.seq)
		}
		s.calls = append(s.calls, slackCall{method: method, ts: ts, text: r.Form.Get("text"), blocks: r.Form.Get("blocks")})
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": fakeSlackChannel, "ts": ts})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// configure points drift options at the fake, with the credentials in a
// directory as a mounted Secret would hold them.
func (s *fakeSlack) configure(t *testing.T, o *intercept.DriftOptions) {
	t.Helper()
	dir := t.TempDir()
	mustf(t, os.WriteFile(filepath.Join(dir, slackesc.BotTokenFile), []byte("xoxb-e2e\n"), 0o600), "bot token")
	mustf(t, os.WriteFile(filepath.Join(dir, slackesc.SigningSecretFile), []byte(fakeSlackSecret+"\n"), 0o600), "signing secret")
	o.SlackChannel, o.SlackCredentialsDir, o.SlackAPIURL = fakeSlackChannel, dir, s.srv.URL+"/"
}

func (s *fakeSlack) callsOf(method string) []slackCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []slackCall
	for _, c := range s.calls {
		if c.method == method {
			out = append(out, c)
		}
	}
	return out
}

func (s *fakeSlack) posted() []slackCall { return s.callsOf("chat.postMessage") }

// buttons returns the value of each button of a posted message, by action
// id.
func buttons(t *testing.T, blocks string) map[string]string {
	t.Helper()
	var list []struct {
		Type     string `json:"type"`
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	mustf(t, json.Unmarshal([]byte(blocks), &list), "the message's blocks")
	out := map[string]string{}
	for _, b := range list {
		if b.Type == "actions" {
			for _, e := range b.Elements {
				out[e.ActionID] = e.Value
			}
		}
	}
	return out
}

// click is a button click as Slack posts it to the interaction endpoint.
type click struct {
	body      string
	timestamp string
	signature string
}

func newClick(t *testing.T, action, value, ts, blocks string) click {
	t.Helper()
	var rawBlocks json.RawMessage = []byte(blocks)
	payload, err := json.Marshal(map[string]any{
		"type":      "block_actions",
		"user":      map[string]any{"id": "U0BOB", "username": "bob"},
		"container": map[string]any{"type": "message", "channel_id": fakeSlackChannel, "message_ts": ts},
		"channel":   map[string]any{"id": fakeSlackChannel},
		"message":   map[string]any{"ts": ts, "blocks": rawBlocks},
		"actions":   []any{map[string]any{"type": "button", "action_id": action, "block_id": "kausality_actions", "value": value}},
	})
	mustf(t, err, "click payload")
	c := click{body: "payload=" + url.QueryEscape(string(payload)), timestamp: strconv.FormatInt(time.Now().Unix(), 10)}
	c.signature = sign(fakeSlackSecret, c.timestamp, c.body)
	return c
}

func sign(secret, timestamp, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + timestamp + ":" + body))
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

func (c click) send(t *testing.T, endpoint string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(c.body))
	mustf(t, err, "click request")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.signature != "" {
		req.Header.Set("X-Slack-Signature", c.signature)
	}
	if c.timestamp != "" {
		req.Header.Set("X-Slack-Request-Timestamp", c.timestamp)
	}
	resp, err := http.DefaultClient.Do(req)
	mustf(t, err, "posting the click")
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestSlackEscalation(t *testing.T) {
	slack := newFakeSlack(t)
	rig := newDriftRig(t, "slack", 1, func(o *framework.ReplicaOptions) { slack.configure(t, &o.Drifts) })
	rig.drift(0, "drifted")

	var msg slackCall
	eventually(t, 30*time.Second, "the escalation message", func() error {
		for _, m := range slack.posted() {
			if strings.Contains(m.blocks, rig.f.widget) {
				msg = m
				return nil
			}
		}
		return fmt.Errorf("%d messages, none about Widget %s", len(slack.posted()), rig.f.widget)
	})
	messageRecorded(t, rig.recordNS, msg.ts)
	values := buttons(t, msg.blocks)
	for _, action := range []string{slackesc.ActionApproveOnce, slackesc.ActionApproveGeneration, slackesc.ActionReject, slackesc.ActionSnooze} {
		if values[action] == "" {
			t.Fatalf("the message lacks the %s button: %s", action, msg.blocks)
		}
	}
	for _, want := range []string{"Gadget", "spec.value", "drifted", wgControllerUser} {
		if !strings.Contains(msg.blocks, want) {
			t.Errorf("the message does not show %q: %s", want, msg.blocks)
		}
	}
	endpoint := rig.replicas[0].SlackURL
	before := rig.f.getWidget().GetAnnotations()[wgAnnApprovals]

	approve := newClick(t, slackesc.ActionApproveOnce, values[slackesc.ActionApproveOnce], msg.ts, msg.blocks)
	forged := approve
	forged.signature = sign("not-the-secret", forged.timestamp, forged.body)
	unsigned := approve
	unsigned.signature, unsigned.timestamp = "", ""
	stale := newClick(t, slackesc.ActionApproveOnce, values[slackesc.ActionApproveOnce], msg.ts, msg.blocks)
	stale.timestamp = strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10)
	stale.signature = sign(fakeSlackSecret, stale.timestamp, stale.body)
	for name, c := range map[string]click{"a bad signature": forged, "no signature": unsigned, "a stale timestamp": stale} {
		if code := c.send(t, endpoint); code != http.StatusUnauthorized {
			t.Errorf("a click with %s got %d, want 401", name, code)
		}
	}
	updatesBefore := len(slack.callsOf("chat.update"))
	if got := rig.f.getWidget().GetAnnotations()[wgAnnApprovals]; got != before {
		t.Fatalf("a refused click changed the approvals: %q", got)
	}

	if code := approve.send(t, endpoint); code != http.StatusOK {
		t.Fatalf("a signed click got %d", code)
	}
	eventually(t, 20*time.Second, "the click becomes an approval", func() error {
		got := wgApprovals(t, rig.f.getWidget().GetAnnotations()[wgAnnApprovals])
		for _, a := range got {
			if a["name"] == "g" && a["kind"] == "Gadget" && a["mode"] == "once" && a["user"] == "slack:U0BOB/bob" {
				return nil
			}
		}
		return fmt.Errorf("approvals %v", got)
	})
	approved := rig.f.getWidget().GetAnnotations()[wgAnnApprovals]
	if code := approve.send(t, endpoint); code != http.StatusUnauthorized {
		t.Errorf("a replayed click got %d, want 401", code)
	}
	if got := rig.f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approved {
		t.Errorf("the replay changed the approvals: %q", got)
	}
	if n := len(slack.callsOf("chat.update")); n < updatesBefore {
		t.Errorf("chat.update calls went down: %d", n)
	}

	// The blocked write of the controller now goes through, once.
	eventually(t, 20*time.Second, "the controller's write succeeds", func() error {
		_, err := rig.f.writeGadget(rig.ctrls[0], "g", false, func(g *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(g.Object, "drifted", "spec", "value")
		})
		return err
	})
	if v := rig.f.gadgetValue("g"); v != "drifted" {
		t.Fatalf("Gadget value %q", v)
	}
	// The drift ended: the message says so and loses its buttons.
	eventually(t, 20*time.Second, "the message is marked resolved", func() error {
		for _, u := range slack.callsOf("chat.update") {
			if u.ts == msg.ts && strings.Contains(u.text, "esolved") && len(buttons(t, u.blocks)) == 0 {
				return nil
			}
		}
		return fmt.Errorf("updates %+v", slack.callsOf("chat.update"))
	})
	if res := rig.reports(v1alpha1.PhaseResolved); len(res) != 1 || res[0].Spec.Reason != v1alpha1.ReasonApproved {
		t.Errorf("Resolved reports %+v", res)
	}
}
