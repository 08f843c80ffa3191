package escalation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPostRateLimited replays a controller denied in a loop: past its
// bucket its drifts are not posted, other controllers still are, and the
// suppressed ones end up in one summary message, none lost.
func TestPostRateLimited(t *testing.T) {
	api := newFakeSlack(t)
	now := testNow
	e, err := New(Config{
		BotToken: "xoxb-test", SigningSecret: testSecret, Channel: testChannel,
		APIURL: api.srv.URL + "/", Parents: &fakeEditor{parent: testParent(5)}, Drifts: newFakeDrifts(),
		Clock: func() time.Time { return now },
		// A long SummaryAfter: the test posts the summary itself.
		Limits: MessageLimits{PerController: Rate{Every: time.Minute, Burst: 3}, Total: Rate{Every: time.Second, Burst: 5}, SummaryAfter: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	post := func(controller string, i int) error {
		r := testReport()
		r.Spec.ID = fmt.Sprintf("%016x", i)
		r.Spec.Request.User = controller
		_, err := e.Post(context.Background(), r)
		return err
	}
	const loop = "system:serviceaccount:shop:looping"
	posted, suppressed := 0, 0
	for i := range 20 {
		switch err := post(loop, i); {
		case err == nil:
			posted++
		case errors.Is(err, ErrSuppressed):
			suppressed++
		default:
			t.Fatal(err)
		}
	}
	if posted != 3 || suppressed != 17 {
		t.Errorf("posted %d, suppressed %d; want 3 and 17", posted, suppressed)
	}
	if err := post("system:serviceaccount:shop:other", 100); err != nil {
		t.Errorf("another controller's drift: %v", err)
	}
	// The total bucket (5) holds however many controllers there are.
	for i := range 3 {
		_ = post(fmt.Sprintf("controller-%d", i), 200+i)
	}
	if n := len(api.recorded()); n != 5 {
		t.Errorf("%d messages, want 5 (the total burst)", n)
	}
	api.reset()
	e.postSummary(context.Background())
	calls := api.recorded()
	if len(calls) != 1 || calls[0].Method != "chat.postMessage" {
		t.Fatalf("summary calls %+v", calls)
	}
	text := calls[0].text(t)
	for _, want := range []string{"19 more drift messages were suppressed", "17 more drifts from controller `" + loop + "` suppressed",
		"1 more drifts from controller `controller-2` suppressed"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	// Counted once: a second summary has nothing to say.
	api.reset()
	e.postSummary(context.Background())
	if n := len(api.recorded()); n != 0 {
		t.Errorf("an empty summary was posted")
	}
	// The bucket refills.
	now = now.Add(time.Minute)
	if err := post(loop, 300); err != nil {
		t.Errorf("a minute later: %v", err)
	}
}

// TestSummaryNotLost: a summary Slack refuses is kept for the next one.
func TestSummaryNotLost(t *testing.T) {
	m := newMessageLimiter(MessageLimits{PerController: Rate{Every: time.Hour, Burst: 1}})
	if ok, _ := m.allow("a", testNow); !ok {
		t.Fatal("the first message was suppressed")
	}
	_, schedule := m.allow("a", testNow)
	if !schedule {
		t.Error("the first suppression schedules no summary")
	}
	if _, again := m.allow("a", testNow); again {
		t.Error("a second summary was scheduled while one is due")
	}
	counts := m.takeSuppressed()
	if !m.giveBack(counts) {
		t.Error("a summary given back is not scheduled again")
	}
	if got := m.takeSuppressed()["a"]; got != 2 {
		t.Errorf("%d suppressed, want 2", got)
	}
}

func TestSummaryTextIsBounded(t *testing.T) {
	counts := map[string]int{}
	for i := range 3 * maxSummaryLines {
		counts[fmt.Sprintf("controller-%03d", i)] = i + 1
	}
	text := summaryText(counts)
	if !strings.Contains(text, fmt.Sprintf("… and %d more controllers", 2*maxSummaryLines)) {
		t.Errorf("summary:\n%s", text)
	}
	if len(text) > maxSectionText {
		t.Errorf("summary is %d long", len(text))
	}
	// Most suppressed first.
	if !strings.Contains(strings.SplitN(text, "\n", 3)[1], "controller-059") {
		t.Errorf("summary does not start with the loudest controller:\n%s", text)
	}
	if summaryText(nil) != "" {
		t.Error("a summary of nothing")
	}
}
