package escalation

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The interaction endpoint is reachable from the internet (Slack must
// reach it through an ingress), and whoever reaches it can send requests
// without any signature: a flood of them must not become as many log
// lines.
func TestUnsignedFloodIsNotAFloodOfLogLines(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	api := newFakeSlack(t)
	e, err := New(Config{
		BotToken: "xoxb-test", SigningSecret: testSecret, Channel: testChannel,
		APIURL: api.srv.URL + "/", Parents: &fakeEditor{parent: testParent(5)}, Drifts: newFakeDrifts(),
		Clock: func() time.Time { return testNow }, Log: zap.New(core),
	})
	if err != nil {
		t.Fatal(err)
	}
	const requests = 1000
	for range requests {
		r := httptest.NewRequest(http.MethodPost, "/slack/interactions", strings.NewReader("payload=%7B%7D"))
		w := httptest.NewRecorder()
		e.InteractionHandler().ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("status %d", w.Code)
		}
	}
	if n := logs.Len(); n > 10 {
		t.Errorf("%d unsigned requests wrote %d log lines (%q); a flood from anyone on the internet should cost a bounded few",
			requests, n, logs.All()[0].Message)
	}
}
