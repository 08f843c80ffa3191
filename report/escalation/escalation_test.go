package escalation

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

func TestPost(t *testing.T) {
	longName := strings.Repeat("n", 1990)
	tests := []struct {
		name    string
		report  func() v1alpha1.DriftReport
		buttons bool
		want    []string
		absent  []string
	}{
		{
			name: "drift", report: testReport, buttons: true,
			want: []string{
				"Drift: ReplicaSet web-6d4 changed by the controller of Deployment web",
				"`apps/v1 Deployment shop/web`", "generation 5 (observed 5)",
				"`apps/v1 ReplicaSet shop/web-6d4`", "generation 3",
				"`system:serviceaccount:kube-system:deployment-controller`", "field manager `kube-controller-manager`", "UPDATE",
				"spec.replicas: 3 → 5",
				// Markup in values is escaped, not rendered.
				`spec.template.metadata.labels.note: &lt;unset&gt; → "&lt;!channel&gt;"`,
				"*Trace*", "1. `apps/v1 Deployment web` generation 5 by `alice@example.com` at 2026-03-01T11:59:00Z",
				"2. `apps/v1 ReplicaSet web-6d4` generation 3",
				"0123456789abcdef",
			},
			absent: []string{"<!channel>", "Not allowed"},
		},
		{
			name: "a violation of allowances names the field and the allowance it needed", buttons: true,
			report: func() v1alpha1.DriftReport {
				r := testReport()
				r.Spec.Allowances = &v1alpha1.AllowanceVerdict{Mode: "enforce", Violations: []v1alpha1.AllowanceViolation{
					{Field: "spec.template.spec.containers[0].image", NeededKind: "ReplicaSet", NeededMutation: "spec.template.spec.containers[0].image"}}}
				return r
			},
			want: []string{"*Not allowed (allowance-mode enforce)*",
				"spec.template.spec.containers[0].image: needs {kind: ReplicaSet, mutation: spec.template.spec.containers[0].image}",
				"An approval does not grant an allowance"},
		},
		{
			name: "the values of a Secret never appear", report: secretReport, buttons: true,
			want:   []string{"data.password: (value hidden)", `stringData["api.token"]: (value hidden)`, `type: "Opaque" → "kubernetes.io/basic-auth"`},
			absent: secretValues,
		},
		{
			// The buttons carry the drift id alone, however long the names.
			name: "long references keep their buttons", buttons: true,
			report: func() v1alpha1.DriftReport {
				r := testReport()
				r.Spec.Child.Name = longName
				return r
			},
			want: []string{longName[:100]},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeSlack(t)
			e := newTestEscalator(t, api, &fakeEditor{parent: testParent(5)})
			r := tt.report()
			ref, err := e.Post(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if ref != (MessageRef{Channel: testChannel, Timestamp: testTS}) {
				t.Errorf("message ref %+v", ref)
			}
			calls := api.recorded()
			if len(calls) != 1 || calls[0].Method != "chat.postMessage" || calls[0].Form.Get("channel") != testChannel {
				t.Fatalf("calls %+v", calls)
			}
			posted := calls[0].text(t)
			for _, w := range tt.want {
				if !strings.Contains(posted, w) {
					t.Errorf("message lacks %q:\n%s", w, posted)
				}
			}
			everything := posted + calls[0].Form.Get("blocks")
			for _, a := range tt.absent {
				if strings.Contains(everything, a) {
					t.Errorf("message contains %q:\n%s", a, everything)
				}
			}
			actions := calls[0].actions(t)
			if !tt.buttons {
				if actions != nil {
					t.Errorf("buttons posted: %+v", actions)
				}
				return
			}
			if actions == nil {
				t.Fatal("no buttons")
			}
			var ids, labels []string
			for _, el := range actions.Elements {
				var label struct{ Text string }
				if err := json.Unmarshal(el.Text, &label); err != nil {
					t.Fatal(err)
				}
				ids, labels = append(ids, el.ActionID), append(labels, label.Text)
				v, err := decodeButtonValue(el.Value)
				if err != nil {
					t.Fatalf("button %s: %v", el.ActionID, err)
				}
				if want := (buttonValue{DriftID: r.Spec.ID}); v != want {
					t.Errorf("button %s value %+v, want %+v", el.ActionID, v, want)
				}
				if len(el.Value) > maxButtonValue {
					t.Errorf("button %s value is %d long", el.ActionID, len(el.Value))
				}
			}
			if want := []string{ActionApproveOnce, ActionApproveGeneration, ActionReject, ActionSnooze}; !reflect.DeepEqual(ids, want) {
				t.Errorf("action ids %v, want %v", ids, want)
			}
			if want := []string{"Approve once", "Approve for this generation", "Reject", "Snooze 1h"}; !reflect.DeepEqual(labels, want) {
				t.Errorf("labels %v, want %v", labels, want)
			}
		})
	}
}

func TestPostRefusesAResolvedReport(t *testing.T) {
	api := newFakeSlack(t)
	e := newTestEscalator(t, api, &fakeEditor{parent: testParent(5)})
	r := testReport()
	r.Spec.Phase = v1alpha1.PhaseResolved
	if _, err := e.Post(context.Background(), r); err == nil {
		t.Error("a Resolved report was posted")
	}
	if calls := api.recorded(); len(calls) != 0 {
		t.Errorf("slack called: %+v", calls)
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		reason string
		want   string
	}{
		{v1alpha1.ReasonApproved, "an approval on the parent now allows the write"},
		{v1alpha1.ReasonParentChanged, "the parent's spec changed"},
		{v1alpha1.ReasonChildDeleted, "the child was deleted"},
		{"SomethingElse", "SomethingElse"},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			api := newFakeSlack(t)
			e := newTestEscalator(t, api, &fakeEditor{parent: testParent(5)})
			r := secretReport()
			r.Spec.Phase, r.Spec.Reason = v1alpha1.PhaseResolved, tt.reason
			if err := e.Resolve(context.Background(), MessageRef{Channel: testChannel, Timestamp: testTS}, r); err != nil {
				t.Fatal(err)
			}
			calls := api.recorded()
			if len(calls) != 1 || calls[0].Method != "chat.update" {
				t.Fatalf("calls %+v", calls)
			}
			c := calls[0]
			if c.Form.Get("channel") != testChannel || c.Form.Get("ts") != testTS {
				t.Errorf("updated %s %s", c.Form.Get("channel"), c.Form.Get("ts"))
			}
			blocks := c.text(t)
			for _, w := range []string{"Drift resolved", "*Resolved:* " + tt.want, "`v1 Secret shop/web-creds`"} {
				if !strings.Contains(blocks, w) {
					t.Errorf("message lacks %q:\n%s", w, blocks)
				}
			}
			if c.actions(t) != nil {
				t.Error("the buttons were kept")
			}
			for _, v := range secretValues {
				if strings.Contains(blocks+c.Form.Get("blocks"), v) {
					t.Errorf("message contains %q", v)
				}
			}
		})
	}
	e := newTestEscalator(t, newFakeSlack(t), &fakeEditor{parent: testParent(5)})
	if err := e.Resolve(context.Background(), MessageRef{}, testReport()); err == nil {
		t.Error("resolve without a message ref succeeded")
	}
}

func TestButtonValue(t *testing.T) {
	s, err := buttonValue{DriftID: "0123456789abcdef"}.encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"d":"0123456789abcdef"}`; s != want {
		t.Errorf("encoded %s, want %s", s, want)
	}
	tests := []struct {
		name, value string
		want        string
	}{
		{"round trip", s, "0123456789abcdef"},
		// Messages posted before buttons carried only the id: the objects
		// they name are not read.
		{"objects are ignored", `{"d":"0123456789abcdef","p":{"v":"v1","k":"Namespace","n":"kube-system"},"c":{"v":"v1","k":"Pod","n":"p"},"g":1}`, "0123456789abcdef"},
		{"not JSON", "approve", ""},
		{"no drift id", `{"p":{"v":"apps/v1","k":"Deployment","n":"web"},"g":1}`, ""},
		{"too long", `{"d":"` + strings.Repeat("x", maxButtonValue) + `"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeButtonValue(tt.value)
			if (err == nil) != (tt.want != "") {
				t.Fatalf("err %v, want id %q", err, tt.want)
			}
			if got.DriftID != tt.want && tt.want != "" {
				t.Errorf("decoded %+v, want id %s", got, tt.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	ok := Config{BotToken: "xoxb", SigningSecret: "s", Channel: "C", Parents: &fakeEditor{}, Drifts: newFakeDrifts()}
	tests := []struct {
		name    string
		mutate  func(*Config)
		missing string
	}{
		{"complete", func(*Config) {}, ""},
		{"no token", func(c *Config) { c.BotToken = " " }, "BotToken"},
		{"no secret", func(c *Config) { c.SigningSecret = "" }, "SigningSecret"},
		{"no channel", func(c *Config) { c.Channel = "" }, "Channel"},
		{"no editor", func(c *Config) { c.Parents = nil }, "Parents"},
		{"no open drifts", func(c *Config) { c.Drifts = nil }, "Drifts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			_, err := New(c)
			if tt.missing == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.missing) {
				t.Errorf("err %v, want one naming %s", err, tt.missing)
			}
		})
	}
}

func TestLoadCredentials(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		err   string
	}{
		{"both, trimmed", map[string]string{BotTokenFile: "xoxb-1\n", SigningSecretFile: "  s3\n"}, ""},
		{"no token", map[string]string{SigningSecretFile: "s3"}, BotTokenFile},
		{"no secret", map[string]string{BotTokenFile: "xoxb-1"}, SigningSecretFile},
		{"empty secret", map[string]string{BotTokenFile: "xoxb-1", SigningSecretFile: "\n"}, SigningSecretFile + " is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			token, secret, err := LoadCredentials(dir)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if token != "xoxb-1" || secret != "s3" {
				t.Errorf("got %q %q", token, secret)
			}
		})
	}
}

func TestSnoozed(t *testing.T) {
	with := func(ann map[string]string) *unstructured.Unstructured {
		p := testParent(1)
		p.SetAnnotations(ann)
		return p
	}
	tests := []struct {
		name   string
		parent *unstructured.Unstructured
		want   bool
	}{
		{"nil", nil, false},
		{"no snooze", with(nil), false},
		{"until later", with(map[string]string{annotations.SnoozeUntil: "2026-03-01T13:00:00Z"}), true},
		{"expired", with(map[string]string{annotations.SnoozeUntil: "2026-03-01T11:00:00Z"}), false},
		{"newer spelling", with(map[string]string{annotations.Snooze: `{"expiry":"2026-03-01T13:00:00Z","user":"carol"}`}), true},
		{"malformed", with(map[string]string{annotations.SnoozeUntil: "soon"}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Snoozed(tt.parent, testNow); got != tt.want {
				t.Errorf("Snoozed = %v, want %v", got, tt.want)
			}
		})
	}
	// SetSnooze, which the snooze button writes, is read as snoozed.
	e, err := annotations.SetSnooze(snoozeFor, "", annotations.Stamp{User: "slack:U1/x", At: testNow})
	if err != nil {
		t.Fatal(err)
	}
	if !Snoozed(with(e.Set), testNow.Add(59*time.Minute)) || Snoozed(with(e.Set), testNow.Add(snoozeFor)) {
		t.Error("the snooze button's edit is not read as an hour's snooze")
	}
}
