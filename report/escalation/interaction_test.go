package escalation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// postedMessage posts the test drift and returns the call, so that clicks
// carry what Slack would send back.
func postedMessage(t *testing.T, e *Escalator, api *fakeSlack) slackCall {
	t.Helper()
	ref, err := e.Post(context.Background(), testReport())
	if err != nil {
		t.Fatal(err)
	}
	drifts(e).add(openDriftOf(testReport(), ref))
	calls := api.recorded()
	api.reset()
	return calls[0]
}

func TestClick(t *testing.T) {
	const stamp = `"user":"slack:U0CAROL/carol","at":"2026-03-01T12:00:00Z"`
	tests := []struct {
		name     string
		action   string
		parentAt int64
		// replicas is the parent's spec.replicas; 0 is the spec at
		// detection (3).
		replicas int64
		// noMessage: Slack did not send the message back.
		noMessage bool
		want      map[string]string
		outcome   string
		buttons   bool
	}{
		{
			name: "approve once", action: ActionApproveOnce, parentAt: 5,
			want:    map[string]string{annotations.Approvals: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":5,"mode":"once",` + stamp + `}]`},
			outcome: "<@U0CAROL> approved the next write (once)",
		},
		{
			name: "approve for this generation", action: ActionApproveGeneration, parentAt: 5,
			want:    map[string]string{annotations.Approvals: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":5,"mode":"generation",` + stamp + `}]`},
			outcome: "<@U0CAROL> approved the writes while the parent is at generation 5",
		},
		{
			name: "reject", action: ActionReject, parentAt: 5,
			want: map[string]string{annotations.Rejections: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4",` +
				`"reason":"rejected in Slack by slack:U0CAROL/carol",` + stamp + `}]`},
			outcome: "<@U0CAROL> rejected the drift",
		},
		{
			name: "snooze keeps the buttons", action: ActionSnooze, parentAt: 5,
			want: map[string]string{
				annotations.SnoozeUntil: "2026-03-01T13:00:00Z",
				annotations.Snooze:      `{"expiry":"2026-03-01T13:00:00Z","user":"slack:U0CAROL/carol","message":"snoozed in Slack (drift 0123456789abcdef)"}`,
			},
			outcome: "<@U0CAROL> snoozed the notifications of the parent for an hour", buttons: true,
		},
		{
			// A snooze click on the same message bumps the generation of
			// kinds that count annotation changes.
			name: "an approval after an annotation-only generation bump is for the current generation", action: ActionApproveOnce, parentAt: 6,
			want:    map[string]string{annotations.Approvals: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":6,"mode":"once",` + stamp + `}]`},
			outcome: "<@U0CAROL> approved the next write (once)",
		},
		{
			name: "approve for this generation after an annotation-only bump", action: ActionApproveGeneration, parentAt: 7,
			want:    map[string]string{annotations.Approvals: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":7,"mode":"generation",` + stamp + `}]`},
			outcome: "<@U0CAROL> approved the writes while the parent is at generation 7",
		},
		{
			name: "an approval after the parent's spec changed writes nothing", action: ActionApproveOnce, parentAt: 6, replicas: 4,
			outcome: "<@U0CAROL> tried to approve, but nothing was written: the parent's spec changed since the drift (generation 5, now 6)", buttons: true,
		},
		{
			name: "without the message sent back, a short one stands in", action: ActionApproveOnce, parentAt: 5, noMessage: true,
			want:    map[string]string{annotations.Approvals: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":5,"mode":"once",` + stamp + `}]`},
			outcome: "<@U0CAROL> approved the next write (once)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeSlack(t)
			parent := testParent(tt.parentAt)
			if tt.replicas != 0 {
				parent.Object["spec"] = map[string]any{"replicas": tt.replicas}
			}
			parents := &fakeEditor{parent: parent}
			e := newTestEscalator(t, api, parents)
			posted := postedMessage(t, e, api)
			if tt.noMessage {
				posted.Form.Del("blocks")
			}
			w := httptest.NewRecorder()
			e.InteractionHandler().ServeHTTP(w, signedRequest(clickBody(t, posted, tt.action), testNow.Unix(), testSecret))
			e.Wait()
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if len(parents.refs) != 1 || parents.refs[0] != (decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"}) {
				t.Errorf("edited %+v", parents.refs)
			}
			got := parents.annotations()
			if len(got) != len(tt.want) {
				t.Errorf("annotations %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s\n got %s\nwant %s", k, got[k], v)
				}
			}
			calls := api.recorded()
			if len(calls) != 1 || calls[0].Method != "chat.update" {
				t.Fatalf("slack calls %+v", calls)
			}
			c := calls[0]
			if c.Form.Get("channel") != testChannel || c.Form.Get("ts") != testTS {
				t.Errorf("updated %s %s", c.Form.Get("channel"), c.Form.Get("ts"))
			}
			text := c.text(t)
			if !strings.Contains(text, tt.outcome) {
				t.Errorf("update lacks %q:\n%s", tt.outcome, text)
			}
			if !tt.noMessage && !strings.Contains(text, "spec.replicas: 3 → 5") {
				t.Errorf("the update lost the drift:\n%s", text)
			}
			if has := c.actions(t) != nil; has != tt.buttons {
				t.Errorf("buttons kept: %v, want %v", has, tt.buttons)
			}
		})
	}
}

func TestClickRefused(t *testing.T) {
	const path = "/slack/interactions"
	now := testNow.Unix()
	good := func(t *testing.T, posted slackCall) string { return clickBody(t, posted, ActionApproveOnce) }
	tests := []struct {
		name    string
		request func(t *testing.T, posted slackCall) *http.Request
		status  int
	}{
		{"wrong secret", func(t *testing.T, p slackCall) *http.Request {
			return signedRequest(good(t, p), now, "another-secret")
		}, http.StatusUnauthorized},
		{"body changed after signing", func(t *testing.T, p slackCall) *http.Request {
			r := signedRequest(good(t, p), now, testSecret)
			return withBody(r, strings.Replace(good(t, p), "approve_once", "approve_generation", 1))
		}, http.StatusUnauthorized},
		{"no signature", func(t *testing.T, p slackCall) *http.Request {
			r := signedRequest(good(t, p), now, testSecret)
			r.Header.Del(signatureHeader)
			return r
		}, http.StatusUnauthorized},
		{"no timestamp", func(t *testing.T, p slackCall) *http.Request {
			r := signedRequest(good(t, p), now, testSecret)
			r.Header.Del(timestampHeader)
			return r
		}, http.StatusUnauthorized},
		{"not v0", func(t *testing.T, p slackCall) *http.Request {
			r := signedRequest(good(t, p), now, testSecret)
			r.Header.Set(signatureHeader, strings.Replace(r.Header.Get(signatureHeader), "v0=", "v1=", 1))
			return r
		}, http.StatusUnauthorized},
		{"timestamp too old", func(t *testing.T, p slackCall) *http.Request {
			return signedRequest(good(t, p), now-6*60, testSecret)
		}, http.StatusUnauthorized},
		{"timestamp too far ahead", func(t *testing.T, p slackCall) *http.Request {
			return signedRequest(good(t, p), now+6*60, testSecret)
		}, http.StatusUnauthorized},
		{"oversized body", func(t *testing.T, p slackCall) *http.Request {
			return signedRequest("payload="+strings.Repeat("x", maxInteractionBody), now, testSecret)
		}, http.StatusRequestEntityTooLarge},
		{"unknown action", func(t *testing.T, p slackCall) *http.Request {
			return signedRequest(clickBody(t, p, "kausality_delete_everything"), now, testSecret)
		}, http.StatusBadRequest},
		{"not a block action", func(t *testing.T, p slackCall) *http.Request {
			return signedRequest(strings.Replace(good(t, p), "block_actions", "view_submission", 1), now, testSecret)
		}, http.StatusBadRequest},
		{"no payload", func(*testing.T, slackCall) *http.Request {
			return signedRequest("token=x", now, testSecret)
		}, http.StatusBadRequest},
		{"GET", func(*testing.T, slackCall) *http.Request {
			return httptest.NewRequest(http.MethodGet, path, nil)
		}, http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeSlack(t)
			parents := &fakeEditor{parent: testParent(5)}
			e := newTestEscalator(t, api, parents)
			posted := postedMessage(t, e, api)
			w := httptest.NewRecorder()
			e.InteractionHandler().ServeHTTP(w, tt.request(t, posted))
			e.Wait()
			if w.Code != tt.status {
				t.Errorf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if n := parents.callCount(); n != 0 {
				t.Errorf("parent edited %d times", n)
			}
			if len(parents.annotations()) != 0 {
				t.Errorf("annotations %v", parents.annotations())
			}
			if calls := api.recorded(); len(calls) != 0 {
				t.Errorf("slack called: %+v", calls)
			}
		})
	}
}

func TestClickReplayed(t *testing.T) {
	tests := []struct {
		name   string
		replay func(first *http.Request, body string) *http.Request
	}{
		{"the same request", func(first *http.Request, body string) *http.Request {
			return withBody(first, body)
		}},
		{"the signature in upper case", func(first *http.Request, body string) *http.Request {
			r := withBody(first, body)
			r.Header.Set(signatureHeader, "v0="+strings.ToUpper(strings.TrimPrefix(first.Header.Get(signatureHeader), "v0=")))
			return r
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeSlack(t)
			parents := &fakeEditor{parent: testParent(5)}
			e := newTestEscalator(t, api, parents)
			body := clickBody(t, postedMessage(t, e, api), ActionSnooze)
			first := signedRequest(body, testNow.Unix(), testSecret)
			w := httptest.NewRecorder()
			e.InteractionHandler().ServeHTTP(w, first)
			e.Wait()
			if w.Code != http.StatusOK {
				t.Fatalf("first: status %d", w.Code)
			}
			before, calls := parents.callCount(), len(api.recorded())
			w = httptest.NewRecorder()
			e.InteractionHandler().ServeHTTP(w, tt.replay(first, body))
			e.Wait()
			if w.Code != http.StatusUnauthorized {
				t.Errorf("replay: status %d, want 401", w.Code)
			}
			if parents.callCount() != before || len(api.recorded()) != calls {
				t.Error("the replay changed something")
			}
		})
	}
}

func TestReplayMemoryIsBounded(t *testing.T) {
	m := newReplayMemory(2)
	later := testNow.Add(signatureWindow)
	for _, sig := range []string{"a", "b"} {
		if err := m.firstUse(sig, later, testNow); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.firstUse("c", later, testNow); err != errTooManyRequests {
		t.Errorf("full memory: %v, want errTooManyRequests", err)
	}
	// Once the first two leave the window, they make room.
	if err := m.firstUse("c", later.Add(signatureWindow), later.Add(1)); err != nil {
		t.Errorf("after the window: %v", err)
	}
	if len(m.until) != 1 {
		t.Errorf("remembered %d", len(m.until))
	}
}

func withBody(r *http.Request, body string) *http.Request {
	c := httptest.NewRequest(r.Method, r.URL.Path, strings.NewReader(body))
	c.Header = r.Header.Clone()
	return c
}

func TestOutcomesStayBounded(t *testing.T) {
	d := openDriftOf(testReport(), MessageRef{Channel: testChannel, Timestamp: testTS})
	var blocks []slack.Block
	for i := range 3 * maxOutcomes {
		blocks = clickedBlocks(blocks, d, fmt.Sprintf("click %d", i), true)
	}
	ids := map[string]bool{}
	outcomes := 0
	for _, b := range blocks {
		if ids[b.ID()] && b.ID() != "" {
			t.Errorf("block id %s twice", b.ID())
		}
		ids[b.ID()] = true
		if strings.HasPrefix(b.ID(), outcomeBlockIDPrefix) {
			outcomes++
		}
	}
	if outcomes != maxOutcomes {
		t.Errorf("%d outcomes, want %d", outcomes, maxOutcomes)
	}
	if last := blocks[len(blocks)-1]; last.ID() != actionsBlockID {
		t.Errorf("the buttons are not last: %s", last.ID())
	}
}

// TestClickBoundToOpenDrift replays clicks that name something other than
// the drift of the message clicked: each is refused, writes nothing, and
// the clicker is told why.
func TestClickBoundToOpenDrift(t *testing.T) {
	kubeSystem := func(d *OpenDrift) {
		d.Parent = decision.ObjectRef{APIVersion: "v1", Kind: "Namespace", Name: "kube-system"}
		d.Child = decision.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "kube-system", Name: "coredns"}
	}
	tests := []struct {
		name string
		// drift changes the open drift the ledger holds; nil: none.
		drift func(*OpenDrift)
		// payload changes the click's payload before it is signed.
		payload  func(string) string
		excluded []string
		status   int
		told     string
	}{
		{name: "a made-up drift id", drift: func(*OpenDrift) {},
			payload: func(p string) string { return strings.ReplaceAll(p, "0123456789abcdef", "fedcba9876543210") },
			status:  http.StatusNotFound, told: "drift fedcba9876543210 is not open"},
		{name: "a drift id that is not one", drift: func(*OpenDrift) {},
			payload: func(p string) string { return strings.ReplaceAll(p, "0123456789abcdef", "../../secrets") },
			status:  http.StatusNotFound, told: "is not a drift id"},
		{name: "a resolved drift", status: http.StatusNotFound, told: "is not open"},
		{name: "another channel", drift: func(*OpenDrift) {},
			payload: func(p string) string { return strings.ReplaceAll(p, testChannel, "C0OTHER") },
			status:  http.StatusForbidden, told: "only in the channel it was posted to"},
		{name: "another message", drift: func(*OpenDrift) {},
			payload: func(p string) string { return strings.ReplaceAll(p, testTS, "1772366400.999999") },
			status:  http.StatusForbidden, told: "not the one drift 0123456789abcdef was posted as"},
		{name: "a drift never posted", drift: func(d *OpenDrift) { d.Message = nil },
			status: http.StatusConflict, told: "has no Slack message on record yet"},
		{name: "a record naming Namespace kube-system", drift: kubeSystem,
			status: http.StatusForbidden, told: "never gates"},
		{name: "a parent in a namespace the configuration excludes", drift: func(*OpenDrift) {}, excluded: []string{"shop"},
			status: http.StatusForbidden, told: "never gates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeSlack(t)
			parents := &fakeEditor{parent: testParent(5)}
			e := newTestEscalator(t, api, parents)
			e.excluded = func() []string { return tt.excluded }
			ref, err := e.Post(context.Background(), testReport())
			if err != nil {
				t.Fatal(err)
			}
			posted := api.recorded()[0]
			api.reset()
			if tt.drift != nil {
				d := openDriftOf(testReport(), ref)
				tt.drift(&d)
				drifts(e).add(d)
			}
			body := clickBody(t, posted, ActionApproveOnce)
			if tt.payload != nil {
				body = tt.payload(body)
			}
			w := httptest.NewRecorder()
			e.InteractionHandler().ServeHTTP(w, signedRequest(body, testNow.Unix(), testSecret))
			e.Wait()
			if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.told) {
				t.Errorf("status %d %q, want %d %q", w.Code, w.Body, tt.status, tt.told)
			}
			if n := parents.callCount(); n != 0 {
				t.Errorf("parent edited %d times", n)
			}
			if drifts(e).claimCount() != 0 {
				t.Error("a refused click was recorded")
			}
			calls := api.recorded()
			if len(calls) != 1 || calls[0].Method != "chat.postEphemeral" || calls[0].Form.Get("user") != "U0CAROL" ||
				!strings.Contains(calls[0].Form.Get("text"), tt.told) {
				t.Errorf("the clicker was not told %q: %+v", tt.told, calls)
			}
		})
	}
}

// TestClickReplayedOnAnotherReplica sends the same signed click to two
// escalators that share the ledger, as two replicas do: the second one
// has never seen the signature, and refuses it from the record.
func TestClickReplayedOnAnotherReplica(t *testing.T) {
	api := newFakeSlack(t)
	parents := &fakeEditor{parent: testParent(5)}
	first := newTestEscalator(t, api, parents)
	second := newTestEscalator(t, api, parents)
	second.drifts = first.drifts
	body := clickBody(t, postedMessage(t, first, api), ActionSnooze)
	for i, e := range []*Escalator{first, second} {
		w := httptest.NewRecorder()
		e.InteractionHandler().ServeHTTP(w, signedRequest(body, testNow.Unix(), testSecret))
		e.Wait()
		want := http.StatusOK
		if i == 1 {
			want = http.StatusUnauthorized
		}
		if w.Code != want {
			t.Errorf("replica %d: status %d, want %d", i, w.Code, want)
		}
	}
	if n := parents.callCount(); n != 1 {
		t.Errorf("parent edited %d times, want once", n)
	}
}

// TestClickWhenTheLedgerCannotTakeIt: nothing is written, and Slack is
// told to try again.
func TestClickWhenTheLedgerCannotTakeIt(t *testing.T) {
	for _, tt := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("etcdserver: request timed out"), http.StatusServiceUnavailable},
		{fmt.Errorf("%w (64)", ErrTooManyClicks), http.StatusTooManyRequests},
	} {
		t.Run(tt.err.Error(), func(t *testing.T) {
			api := newFakeSlack(t)
			parents := &fakeEditor{parent: testParent(5)}
			e := newTestEscalator(t, api, parents)
			body := clickBody(t, postedMessage(t, e, api), ActionApproveOnce)
			drifts(e).err = tt.err
			w := httptest.NewRecorder()
			e.InteractionHandler().ServeHTTP(w, signedRequest(body, testNow.Unix(), testSecret))
			e.Wait()
			if w.Code != tt.status || !strings.Contains(w.Body.String(), "click again") {
				t.Errorf("status %d %q, want %d", w.Code, w.Body, tt.status)
			}
			if parents.callCount() != 0 {
				t.Error("the parent was edited")
			}
		})
	}
}

func TestCheckClick(t *testing.T) {
	msg := &MessageRef{Channel: "C0DRIFT", Timestamp: "1.2"}
	base := OpenDrift{ID: "0123456789abcdef", Message: msg,
		Parent: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"},
		Child:  decision.ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "web-1"}}
	tests := []struct {
		name              string
		drift             func(*OpenDrift)
		channel, ts, conf string
		excluded          []string
		wantStatus        int
	}{
		{name: "the drift's message", channel: "C0DRIFT", ts: "1.2", conf: "C0DRIFT"},
		{name: "a configured channel name is not compared", channel: "C0DRIFT", ts: "1.2", conf: "#drift"},
		{name: "no message ts in the click", channel: "C0DRIFT", conf: "C0DRIFT"},
		{name: "another channel", channel: "C0OTHER", ts: "1.2", conf: "C0DRIFT", wantStatus: 403},
		{name: "the drift's channel is not the configured one", channel: "C0DRIFT", ts: "1.2", conf: "C0NEW", wantStatus: 403},
		{name: "another message", channel: "C0DRIFT", ts: "9.9", conf: "C0DRIFT", wantStatus: 403},
		{name: "not posted", drift: func(d *OpenDrift) { d.Message = nil }, channel: "C0DRIFT", conf: "C0DRIFT", wantStatus: 409},
		{name: "child in kube-system", drift: func(d *OpenDrift) { d.Child.Namespace = "kube-system" }, channel: "C0DRIFT", conf: "C0DRIFT", wantStatus: 403},
		{name: "Namespace kube-public as parent", drift: func(d *OpenDrift) {
			d.Parent = decision.ObjectRef{APIVersion: "v1", Kind: "Namespace", Name: "kube-public"}
		}, channel: "C0DRIFT", conf: "C0DRIFT", wantStatus: 403},
		{name: "a Namespace the proxy gates", drift: func(d *OpenDrift) {
			d.Parent = decision.ObjectRef{APIVersion: "v1", Kind: "Namespace", Name: "shop"}
		}, channel: "C0DRIFT", conf: "C0DRIFT"},
		{name: "kube-system stays ungated when the configuration drops it", drift: func(d *OpenDrift) { d.Parent.Namespace = "kube-system" },
			excluded: []string{"other"}, channel: "C0DRIFT", conf: "C0DRIFT", wantStatus: 403},
		{name: "a configured excluded namespace", excluded: []string{"shop"}, channel: "C0DRIFT", conf: "C0DRIFT", wantStatus: 403},
		{name: "cluster-scoped parent", drift: func(d *OpenDrift) { d.Parent.Namespace = "" }, channel: "C0DRIFT", conf: "C0DRIFT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := base
			if tt.drift != nil {
				tt.drift(&d)
			}
			err := checkClick(d, tt.channel, tt.ts, tt.conf, tt.excluded)
			var r *refusal
			switch {
			case tt.wantStatus == 0 && err != nil:
				t.Errorf("refused: %v", err)
			case tt.wantStatus != 0 && (!errors.As(err, &r) || r.status != tt.wantStatus):
				t.Errorf("err %v, want a refusal with %d", err, tt.wantStatus)
			}
		})
	}
}
