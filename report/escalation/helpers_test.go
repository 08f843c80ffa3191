package escalation

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

const (
	testSecret  = "8f742231b10e8888abcd99yyyzzz85a5"
	testChannel = "C0DRIFT"
	testTS      = "1772366400.000100"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// slackCall is one call the fake Slack API received.
type slackCall struct {
	Method string
	Form   url.Values
}

// block is the part of a Block Kit block the tests look at.
type block struct {
	Type     string `json:"type"`
	BlockID  string `json:"block_id"`
	Elements []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
		// Text is a button's label object, or a context element's text.
		Text json.RawMessage `json:"text"`
	} `json:"elements"`
}

func (c slackCall) blocks(t *testing.T) []block {
	t.Helper()
	var bs []block
	if err := json.Unmarshal([]byte(c.Form.Get("blocks")), &bs); err != nil {
		t.Fatalf("blocks of %s: %v\n%s", c.Method, err, c.Form.Get("blocks"))
	}
	return bs
}

// text is every string of the call's blocks, decoded, one a line.
func (c slackCall) text(t *testing.T) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(c.Form.Get("blocks")), &v); err != nil {
		t.Fatalf("blocks of %s: %v", c.Method, err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return strings.Join(out, "\n") + "\n" + c.Form.Get("text")
}

func (c slackCall) actions(t *testing.T) *block {
	t.Helper()
	for _, b := range c.blocks(t) {
		if b.Type == "actions" {
			return &b
		}
	}
	return nil
}

// fakeSlack plays the Slack Web API: it records chat.postMessage and
// chat.update and answers them as Slack does.
type fakeSlack struct {
	mu    sync.Mutex
	calls []slackCall
	srv   *httptest.Server
}

func newFakeSlack(t *testing.T) *fakeSlack {
	f := &fakeSlack{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake slack: %v", err)
		}
		method := strings.TrimPrefix(r.URL.Path, "/")
		f.mu.Lock()
		f.calls = append(f.calls, slackCall{Method: method, Form: r.PostForm})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch method {
		case "chat.postMessage":
			fmt.Fprintf(w, `{"ok":true,"channel":%q,"ts":%q}`, testChannel, testTS)
		case "chat.postEphemeral":
			fmt.Fprint(w, `{"ok":true,"message_ts":"1772366400.000200"}`)
		case "chat.update":
			fmt.Fprintf(w, `{"ok":true,"channel":%q,"ts":%q,"text":""}`, r.PostForm.Get("channel"), r.PostForm.Get("ts"))
		default:
			fmt.Fprint(w, `{"ok":false,"error":"unknown_method"}`)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSlack) recorded() []slackCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]slackCall(nil), f.calls...)
}

func (f *fakeSlack) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// fakeEditor is a ParentEditor over one object in memory.
type fakeEditor struct {
	mu     sync.Mutex
	parent *unstructured.Unstructured
	calls  int
	refs   []decision.ObjectRef
}

func (f *fakeEditor) Edit(_ context.Context, ref decision.ObjectRef, compute func(*unstructured.Unstructured) (annotations.Edit, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.refs = append(f.refs, ref)
	obj := f.parent.DeepCopy()
	edit, err := compute(obj)
	if err != nil || edit.Unchanged {
		return err
	}
	f.parent.SetAnnotations(edit.Apply(f.parent.GetAnnotations()))
	return nil
}

func (f *fakeEditor) annotations() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parent.GetAnnotations()
}

func (f *fakeEditor) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func testParent(generation int64) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "uid": "uid-web", "generation": generation},
		"spec":     map[string]any{"replicas": int64(3)},
	}}
	return p
}

// fakeDrifts is the ledger's open drifts in memory.
type fakeDrifts struct {
	mu     sync.Mutex
	open   map[string]OpenDrift
	claims map[string]map[string]bool
	// err, when set, is what reading the records fails with.
	err error
}

func newFakeDrifts() *fakeDrifts {
	return &fakeDrifts{open: map[string]OpenDrift{}, claims: map[string]map[string]bool{}}
}

func (f *fakeDrifts) add(d OpenDrift) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open[d.ID] = d
}

func (f *fakeDrifts) claimCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.claims {
		n += len(c)
	}
	return n
}

func (f *fakeDrifts) Claim(_ context.Context, id string, claim ClickClaim, check func(OpenDrift) error) (OpenDrift, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return OpenDrift{}, f.err
	}
	d, ok := f.open[id]
	if !ok {
		return OpenDrift{}, ErrNoOpenDrift
	}
	if err := check(d); err != nil {
		return OpenDrift{}, err
	}
	if f.claims[id][claim.Key] {
		return OpenDrift{}, ErrClickReplayed
	}
	if f.claims[id] == nil {
		f.claims[id] = map[string]bool{}
	}
	f.claims[id][claim.Key] = true
	return d, nil
}

// openDriftOf is the open drift the ledger holds for a posted report.
func openDriftOf(r v1alpha1.DriftReport, ref MessageRef) OpenDrift {
	s := r.Spec
	return OpenDrift{
		ID: s.ID, Parent: notify.ParentObject(s.Parent), ParentUID: s.Parent.UID, Generation: s.Parent.Generation,
		ParentSpecHash: settle.SpecHash(testParent(s.Parent.Generation)), Child: notify.ChildObject(s.Child),
		Controller: s.Request.User, Message: &ref,
	}
}

func drifts(e *Escalator) *fakeDrifts { return e.drifts.(*fakeDrifts) }

const testTrace = `[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":5,"user":"alice@example.com","timestamp":"2026-03-01T11:59:00Z"},` +
	`{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4","generation":3,"user":"system:serviceaccount:kube-system:deployment-controller","timestamp":"2026-03-01T11:59:01Z"}]`

// testReport is a detected drift of a ReplicaSet by its Deployment's
// controller.
func testReport() v1alpha1.DriftReport {
	child := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"name": "web-6d4", "namespace": "shop",
			"annotations": map[string]any{annotations.Trace: testTrace}},
	}}
	return v1alpha1.DriftReport{APIVersion: v1alpha1.DriftReportAPIVersion, Kind: v1alpha1.DriftReportKind, Spec: v1alpha1.DriftReportSpec{
		ID: "0123456789abcdef", Phase: v1alpha1.PhaseDetected,
		Parent: v1alpha1.ParentRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web", UID: "uid-web",
			Generation: 5, ObservedGeneration: 5, ControllerManager: "kube-controller-manager"},
		Child:     v1alpha1.ChildRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "web-6d4", UID: "uid-rs", Generation: 3},
		NewObject: runtime.RawExtension{Object: child},
		Request: v1alpha1.RequestInfo{User: "system:serviceaccount:kube-system:deployment-controller",
			FieldManager: "kube-controller-manager", Operation: "UPDATE"},
		Changes: []desired.Change{
			{Path: "spec.replicas", Old: "3", New: "5"},
			{Path: "spec.template.metadata.labels.note", Old: desired.Unset, New: `"<!channel>"`},
		},
	}}
}

// secretReport is a drift of a Secret whose report was (wrongly) not
// redacted.
func secretReport() v1alpha1.DriftReport {
	r := testReport()
	r.Spec.Child = v1alpha1.ChildRef{APIVersion: "v1", Kind: "Secret", Namespace: "shop", Name: "web-creds"}
	r.Spec.NewObject = runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"web-creds"},"data":{"password":"aHVudGVyMg=="}}`)}
	r.Spec.Changes = []desired.Change{
		{Path: "data.password", Old: `"c2VjcmV0LW9sZA=="`, New: `"aHVudGVyMg=="`},
		{Path: `stringData["api.token"]`, Old: desired.Unset, New: `"tok-plaintext-value"`},
		{Path: "type", Old: `"Opaque"`, New: `"kubernetes.io/basic-auth"`},
	}
	return r
}

var secretValues = []string{"c2VjcmV0LW9sZA", "aHVudGVyMg", "tok-plaintext-value"}

func newTestEscalator(t *testing.T, slackAPI *fakeSlack, parents ParentEditor) *Escalator {
	t.Helper()
	e, err := New(Config{
		BotToken: "xoxb-test", SigningSecret: testSecret, Channel: testChannel,
		APIURL: slackAPI.srv.URL + "/", Parents: parents, Drifts: newFakeDrifts(),
		Clock: func() time.Time { return testNow },
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// sign returns the Slack signature of body sent at ts.
func sign(secret string, ts int64, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:%s", ts, body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// clickBody is the form body of a click on the button actionID of the
// posted message.
func clickBody(t *testing.T, posted slackCall, actionID string) string {
	t.Helper()
	var value string
	if posted.Form.Get("blocks") != "" {
		if a := posted.actions(t); a != nil {
			for _, el := range a.Elements {
				if el.ActionID == actionID {
					value = el.Value
				}
			}
		}
	}
	if value == "" {
		value = `{"d":"0123456789abcdef"}`
	}
	payload := map[string]any{
		"type":      "block_actions",
		"user":      map[string]any{"id": "U0CAROL", "username": "carol", "name": "carol", "team_id": "T1"},
		"container": map[string]any{"type": "message", "message_ts": testTS, "channel_id": testChannel},
		"channel":   map[string]any{"id": testChannel},
		"message":   map[string]any{"type": "message", "ts": testTS, "blocks": json.RawMessage(posted.Form.Get("blocks"))},
		"actions":   []map[string]any{{"action_id": actionID, "block_id": actionsBlockID, "type": "button", "value": value, "action_ts": "1772366401.1"}},
	}
	if posted.Form.Get("blocks") == "" {
		delete(payload, "message")
	}
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return url.Values{"payload": {string(b)}}.Encode()
}

func signedRequest(body string, ts int64, secret string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/slack/interactions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set(timestampHeader, strconv.FormatInt(ts, 10))
	r.Header.Set(signatureHeader, sign(secret, ts, body))
	return r
}
